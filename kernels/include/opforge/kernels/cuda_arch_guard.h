// The arch guard at a library's first CUDA use: the current device's compute capability against
// the code this library embeds (arch_guard.h), decided once per device. Needs the CUDA runtime and
// the build's arch lists as defines, '_'-separated (no quotes or ';' to survive build tools):
//   OPFORGE_CUDA_SASS_ARCHS=80_90  OPFORGE_CUDA_PTX_ARCHS=90   (PTX may be empty)
#pragma once

#include <cuda_runtime_api.h>

#include <map>
#include <mutex>
#include <string>

#include "opforge/kernels/arch_guard.h"

#if !defined(OPFORGE_CUDA_SASS_ARCHS) || !defined(OPFORGE_CUDA_PTX_ARCHS)
#error "define OPFORGE_CUDA_SASS_ARCHS and OPFORGE_CUDA_PTX_ARCHS (the build's arch lists, e.g. 80_90 and 90)"
#endif
#define OPFORGE_ARCH_STRING_(...) #__VA_ARGS__
#define OPFORGE_ARCH_STRING(...) OPFORGE_ARCH_STRING_(__VA_ARGS__)

namespace opforge::kernels::cuda {

inline std::string embedded_sass() { return OPFORGE_ARCH_STRING(OPFORGE_CUDA_SASS_ARCHS); }
inline std::string embedded_ptx() { return OPFORGE_ARCH_STRING(OPFORGE_CUDA_PTX_ARCHS); }

inline std::string underscores_to_semicolons(std::string text) {
  for (char& c : text) c = c == '_' ? ';' : c;
  return text;
}

// "" when `device` can run this library's code; else the error. A device that cannot be queried
// gives "": the launch then reports CUDA's own error.
inline std::string device_arch_error(int device, const std::string& library) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) return "";
  std::vector<Arch> sass, ptx;
  const std::string sass_text = underscores_to_semicolons(embedded_sass());
  const std::string ptx_text = underscores_to_semicolons(embedded_ptx());
  if (!parse_arch_list(sass_text, &sass) || !parse_arch_list(ptx_text, &ptx))
    return library + ": built with a malformed arch list (SASS '" + sass_text + "', PTX '" + ptx_text + "')";
  return arch_error(library, prop.name, Capability{prop.major, prop.minor}, sass, ptx);
}

// The arch error of the current device ("" when it can run this library), computed once per device.
inline const std::string& current_device_arch_error(const std::string& library) {
  static const std::string kUnknown;
  static std::mutex mutex;
  static std::map<int, std::string> by_device;  // nodes never move: references stay valid
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return kUnknown;
  std::lock_guard<std::mutex> lock(mutex);
  auto found = by_device.find(device);
  if (found == by_device.end()) found = by_device.emplace(device, device_arch_error(device, library)).first;
  return found->second;
}

}  // namespace opforge::kernels::cuda
