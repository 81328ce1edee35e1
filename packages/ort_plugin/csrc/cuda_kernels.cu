// CUDA execution provider: the shared CUDA kernels (kernels/include/opforge/kernels/cuda_ops.cuh)
// launched on the stream ONNX Runtime hands the kernel.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <opforge/kernels/cuda_arch_guard.h>
#include <opforge/kernels/cuda_ops.cuh>

#include "cuda_kernels.h"

namespace opforge_ort::cuda {
namespace {
namespace kc = opforge::kernels::cuda;

// ONNX element types (onnxruntime_c_api.h); this file does not include ORT headers.
constexpr int kFloat = 1;
constexpr int kFloat16 = 10;

}  // namespace

int forward(const opforge::kernels::OpDesc& op, int type, bool w_float32, const void* const* inputs,
            void* const* outputs, int64_t rows, int64_t cols, const opforge::kernels::AttrValues& attrs, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (type == kFloat && !w_float32) return kc::forward_by_desc<float>(op, inputs, outputs, rows, cols, attrs, false, s);
  if (type == kFloat16) return kc::forward_by_desc<__half>(op, inputs, outputs, rows, cols, attrs, w_float32, s);
  return cudaErrorInvalidValue;
}

const char* arch_error() {
  const std::string& error = opforge::kernels::cuda::current_device_arch_error("opforge_ort (libopforge_ort.so.1)");
  return error.empty() ? nullptr : error.c_str();
}

const char* error_string(int error) { return cudaGetErrorString(static_cast<cudaError_t>(error)); }

}  // namespace opforge_ort::cuda
