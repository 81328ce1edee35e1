// CPU execution provider: the shared kernels (kernels/include/opforge/kernels/cpu.h) called on
// chunks of the tensor from ORT's intra-op thread pool. The kernels are stateless.
#include <opforge/kernels/cpu.h>

#include "ops.h"

namespace opforge_ort {
namespace {

namespace kc = opforge::kernels::cpu;
using bfloat16 = opforge::kernels::bfloat16;

// About 32K elements per task: far above the pool's per-task cost, small enough to spread
// mid-sized activations over the cores.
constexpr int64_t kGrain = int64_t{1} << 15;

template <class T>
OrtStatus* swish_typed(const Kernel& k, OrtKernelContext* ctx, const Tensor& x, void* y_data) {
  const T* xp = static_cast<const T*>(x.data);
  T* yp = static_cast<T*>(y_data);
  const float beta = k.attr;
  return parallel_for(*k.api, ctx, x.size, kGrain, [=](int64_t begin, int64_t end) {
    kc::swish_forward<T>(xp + begin, yp + begin, end - begin, beta);
  });
}

template <class T>
OrtStatus* rms_norm_typed(const Kernel& k, OrtKernelContext* ctx, const Tensor& x, const Tensor& w, void* y_data,
                          int64_t rows, int64_t cols) {
  const T* xp = static_cast<const T*>(x.data);
  const T* wp = static_cast<const T*>(w.data);
  T* yp = static_cast<T*>(y_data);
  const float eps = k.attr;
  const int64_t rows_per_grain = cols >= kGrain ? 1 : kGrain / cols;
  return parallel_for(*k.api, ctx, rows, rows_per_grain, [=](int64_t row_begin, int64_t row_end) {
    kc::rms_norm_forward<T>(xp, wp, yp, row_begin, row_end, cols, eps);
  });
}

template <class T>
OrtStatus* swiglu_typed(const Kernel& k, OrtKernelContext* ctx, const Tensor& x, void* y_data, int64_t rows,
                        int64_t d) {
  const T* xp = static_cast<const T*>(x.data);
  T* yp = static_cast<T*>(y_data);
  const float beta = k.attr;
  const int64_t rows_per_grain = d >= kGrain ? 1 : kGrain / d;
  return parallel_for(*k.api, ctx, rows, rows_per_grain, [=](int64_t row_begin, int64_t row_end) {
    kc::swiglu_forward<T>(xp, yp, row_begin, row_end, d, beta);
  });
}

}  // namespace

OrtStatus* swiglu_cpu(const Kernel& k, OrtKernelContext* ctx, const Tensor& x, void* y, int64_t rows, int64_t d) {
  switch (x.type) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT: return swiglu_typed<float>(k, ctx, x, y, rows, d);
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE: return swiglu_typed<double>(k, ctx, x, y, rows, d);
    default: return swiglu_typed<bfloat16>(k, ctx, x, y, rows, d);
  }
}

OrtStatus* swish_cpu(const Kernel& k, OrtKernelContext* ctx, const Tensor& x, void* y) {
  switch (x.type) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT: return swish_typed<float>(k, ctx, x, y);
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE: return swish_typed<double>(k, ctx, x, y);
    default: return swish_typed<bfloat16>(k, ctx, x, y);  // validated: the only other CPU type
  }
}

OrtStatus* rms_norm_cpu(const Kernel& k, OrtKernelContext* ctx, const Tensor& x, const Tensor& w, void* y,
                        int64_t rows, int64_t cols) {
  switch (x.type) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT: return rms_norm_typed<float>(k, ctx, x, w, y, rows, cols);
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE: return rms_norm_typed<double>(k, ctx, x, w, y, rows, cols);
    default: return rms_norm_typed<bfloat16>(k, ctx, x, w, y, rows, cols);
  }
}

}  // namespace opforge_ort
