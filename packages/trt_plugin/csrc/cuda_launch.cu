#include <opforge/kernels/cuda.cuh>

#include "cuda_launch.h"

namespace opforge_trt::cuda {
namespace kc = opforge::kernels::cuda;

namespace {
template <class T>
cudaError_t swish_as(const void* x, void* y, int64_t n, float beta, cudaStream_t s) {
  return kc::swish_forward<T>(static_cast<const T*>(x), static_cast<T*>(y), n, beta, s);
}

template <class T>
cudaError_t rms_norm_as(const void* x, const void* w, void* y, int64_t rows, int64_t cols, float eps,
                        cudaStream_t s) {
  return kc::rms_norm_forward<T>(static_cast<const T*>(x), static_cast<const T*>(w), static_cast<T*>(y), rows,
                                 cols, eps, s);
}

template <class T>
cudaError_t swiglu_as(const void* x, void* y, int64_t rows, int64_t d, float beta, cudaStream_t s) {
  return kc::swiglu_forward<T>(static_cast<const T*>(x), static_cast<T*>(y), rows, d, beta, s);
}
}  // namespace

cudaError_t swish(Element type, const void* x, void* y, int64_t n, float beta, cudaStream_t s) {
  switch (type) {
    case Element::kFloat: return swish_as<float>(x, y, n, beta, s);
    case Element::kHalf: return swish_as<__half>(x, y, n, beta, s);
    case Element::kBFloat16: return swish_as<__nv_bfloat16>(x, y, n, beta, s);
  }
  return cudaErrorInvalidValue;
}

cudaError_t rms_norm(Element type, const void* x, const void* w, void* y, int64_t rows, int64_t cols, float eps,
                     cudaStream_t s) {
  switch (type) {
    case Element::kFloat: return rms_norm_as<float>(x, w, y, rows, cols, eps, s);
    case Element::kHalf: return rms_norm_as<__half>(x, w, y, rows, cols, eps, s);
    case Element::kBFloat16: return rms_norm_as<__nv_bfloat16>(x, w, y, rows, cols, eps, s);
  }
  return cudaErrorInvalidValue;
}

cudaError_t swiglu(Element type, const void* x, void* y, int64_t rows, int64_t d, float beta, cudaStream_t s) {
  switch (type) {
    case Element::kFloat: return swiglu_as<float>(x, y, rows, d, beta, s);
    case Element::kHalf: return swiglu_as<__half>(x, y, rows, d, beta, s);
    case Element::kBFloat16: return swiglu_as<__nv_bfloat16>(x, y, rows, d, beta, s);
  }
  return cudaErrorInvalidValue;
}

}  // namespace opforge_trt::cuda
