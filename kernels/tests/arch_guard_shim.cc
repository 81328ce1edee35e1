// C entry to the arch guard's pure decision (arch_guard.h), for test_arch_guard.py through ctypes.
#include <opforge/kernels/arch_guard.h>

#include <cstring>

namespace k = opforge::kernels;

// 0: SASS runs, 1: PTX JIT, 2: no image (message in `error`), -1: a malformed arch list.
extern "C" int opforge_arch_verdict(int major, int minor, const char* sass_text, const char* ptx_text,
                                    char* error, size_t error_size) {
  std::vector<k::Arch> sass, ptx;
  if (!k::parse_arch_list(sass_text, &sass) || !k::parse_arch_list(ptx_text, &ptx)) return -1;
  const k::Capability device{major, minor};
  const std::string message = k::arch_error("libopforge_test.so.1", "Test GPU", device, sass, ptx);
  std::strncpy(error, message.c_str(), error_size - 1);
  error[error_size - 1] = '\0';
  return static_cast<int>(k::arch_verdict(device, sass, ptx));
}
