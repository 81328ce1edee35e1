// CUDA execution provider: the shared CUDA kernels (kernels/include/opforge/kernels/cuda.cuh)
// launched on the stream ONNX Runtime hands the kernel.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <opforge/kernels/cuda.cuh>

#include "cuda_kernels.h"

namespace opforge_ort::cuda {
namespace kc = opforge::kernels::cuda;

// ONNX element types (onnxruntime_c_api.h); this file does not include ORT headers.
constexpr int kFloat = 1;
constexpr int kFloat16 = 10;

int swish(int type, const void* x, void* y, int64_t n, float beta, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (type == kFloat) return kc::swish_forward<float>(static_cast<const float*>(x), static_cast<float*>(y), n, beta, s);
  if (type == kFloat16)
    return kc::swish_forward<__half>(static_cast<const __half*>(x), static_cast<__half*>(y), n, beta, s);
  return cudaErrorInvalidValue;
}

int rms_norm(int type, const void* x, const void* w, void* y, int64_t rows, int64_t cols, float eps, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (type == kFloat)
    return kc::rms_norm_forward<float>(static_cast<const float*>(x), static_cast<const float*>(w),
                                       static_cast<float*>(y), rows, cols, eps, s);
  if (type == kFloat16)
    return kc::rms_norm_forward<__half>(static_cast<const __half*>(x), static_cast<const __half*>(w),
                                        static_cast<__half*>(y), rows, cols, eps, s);
  return cudaErrorInvalidValue;
}

int swiglu(int type, const void* x, void* y, int64_t rows, int64_t d, float beta, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (type == kFloat)
    return kc::swiglu_forward<float>(static_cast<const float*>(x), static_cast<float*>(y), rows, d, beta, s);
  if (type == kFloat16)
    return kc::swiglu_forward<__half>(static_cast<const __half*>(x), static_cast<__half*>(y), rows, d, beta, s);
  return cudaErrorInvalidValue;
}

const char* error_string(int error) { return cudaGetErrorString(static_cast<cudaError_t>(error)); }

}  // namespace opforge_ort::cuda
