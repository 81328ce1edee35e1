// The quantized-rows launch shape on the CPU (RMSNormQuant): per row the inverse root mean square
// (float64 sums, as RMSNorm's), max|Y| and Q with the row's scale (ops/rms_norm_quant.h), Y
// recomputed in each pass from X and W (two multiplies: cheaper than a row buffer's traffic).
// Threading is the caller's (rows [r0, r1)); the float loops are multi-versioned as cpu.h's.
// Included by cpu_ops.h after its bindings: RMSNormQuantKernel is the op's binding.
#pragma once

#include <cstdint>
#include <type_traits>

#include "opforge/kernels/cpu.h"
#include "opforge/kernels/cpu_ops.h"  // Forward (cpu_ops.h includes this file at its end)
#include "opforge/kernels/shapes.h"

#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#pragma GCC push_options
#pragma GCC optimize("no-trapping-math", "tree-vectorize", "vect-cost-model=dynamic")
#define OPFORGE_QUANT_POP_OPTIONS
#endif

namespace opforge::kernels::cpu {

// RMSNormQuant of rows [r0, r1) of a contiguous [rows, cols] X: Q (int8, or float8 e4m3fn bits
// when fp8) and the rows' float32 scales. W is T, or float with a bfloat16 X.
template <class T, class TW>
void rms_norm_quant_forward(const T* x, const TW* w, void* q, float* scale, int64_t r0, int64_t r1,
                            int64_t cols, float eps, bool fp8, float scale_ub);

namespace detail {

// Y = (X * inv) * W in the compute type C (float; double for double), as RMSNorm without its
// store: Y stays in C (the spec: no rounding to X's dtype).
template <class T, class TW, class C>
OPFORGE_ALWAYS_INLINE C quant_row_value(const T* x, const TW* w, C inv, int64_t j) {
  return load(x[j]) * inv * load(w[j]);
}

// max|Y| of a row, NaN ignored (a NaN never wins the comparison), in lanes that vectorize.
template <class T, class TW, class C>
OPFORGE_ALWAYS_INLINE float quant_row_amax(const T* x, const TW* w, C inv, int64_t cols) {
  C lanes[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= cols; j += kLanes) {
    for (int k = 0; k < kLanes; ++k) {
      const C v = quant_row_value(x, w, inv, j + k);
      const C a = v < C(0) ? -v : v;
      lanes[k] = a > lanes[k] ? a : lanes[k];
    }
  }
  C m = 0;
  for (; j < cols; ++j) {
    const C v = quant_row_value(x, w, inv, j);
    const C a = v < C(0) ? -v : v;
    m = a > m ? a : m;
  }
  for (int k = 0; k < kLanes; ++k) m = lanes[k] > m ? lanes[k] : m;
  return static_cast<float>(m);
}

template <class T, class TW, class C>
OPFORGE_ALWAYS_INLINE void quant_row_int8(const T* x, const TW* w, C inv, float scale, int8_t* q, int64_t cols) {
  const float inv_scale = 1.0f / scale;
  for (int64_t j = 0; j < cols; ++j) q[j] = quant_int8(static_cast<float>(quant_row_value(x, w, inv, j)), inv_scale);
}

template <class T, class TW, class C>
OPFORGE_ALWAYS_INLINE void quant_row_fp8(const T* x, const TW* w, C inv, float scale, uint8_t* q, int64_t cols) {
  for (int64_t j = 0; j < cols; ++j) q[j] = quant_fp8_bits(static_cast<float>(quant_row_value(x, w, inv, j)), scale);
}

// Rows [r0, r1) of X [rows, cols]: scale[row] and Q's row (int8, or float8 e4m3fn bits). W is T,
// or float with a bfloat16 X.
template <class T, class TW>
OPFORGE_ALWAYS_INLINE void rms_norm_quant_rows(const T* x, const TW* w, void* q, float* scale, int64_t r0,
                                               int64_t r1, int64_t cols, float eps, bool fp8, float scale_ub) {
  using C = compute_t<T>;
  for (int64_t row = r0; row < r1; ++row) {
    const T* xr = x + row * cols;
    const double mean_square = cols == 0 ? 0.0 : sum_squares(xr, cols) / double(cols);
    const C inv = static_cast<C>(static_cast<float>(rms_inverse(mean_square, double(eps))));
    const float s = quant_scale(quant_row_amax(xr, w, inv, cols), scale_ub, fp8);
    scale[row] = s;
    if (fp8) {
      quant_row_fp8(xr, w, inv, s, static_cast<uint8_t*>(q) + row * cols, cols);
    } else {
      quant_row_int8(xr, w, inv, s, static_cast<int8_t*>(q) + row * cols, cols);
    }
  }
}

// (X's storage type, W's, suffix): W of X's type, or float with a bfloat16 X.
#define OPFORGE_FOR_EACH_QUANT_TYPE(EACH)                                                          \
  EACH(float, float, f32)                                                                          \
  EACH(bfloat16, bfloat16, bf16)                                                                   \
  EACH(double, double, f64)                                                                        \
  EACH(bfloat16, float, bf16_wf32)

#define OPFORGE_DEFINE_QUANT_ENTRIES(T, TW, SUFFIX)                                                      \
  OPFORGE_CPU_ENTRY void rms_norm_quant_##SUFFIX(const T* x, const TW* w, void* q, float* scale,         \
                                                 int64_t r0, int64_t r1, int64_t cols, float eps,        \
                                                 bool fp8, float ub) {                                   \
    rms_norm_quant_rows(x, w, q, scale, r0, r1, cols, eps, fp8, ub);                                     \
  }

#if defined(__clang__)
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wunused-function"
#endif
OPFORGE_FOR_EACH_QUANT_TYPE(OPFORGE_DEFINE_QUANT_ENTRIES)
#if defined(__clang__)
#pragma clang diagnostic pop
#endif
#undef OPFORGE_DEFINE_QUANT_ENTRIES

}  // namespace detail

#define OPFORGE_BIND_QUANT_ENTRIES(T, TW, SUFFIX)                                                       \
  template <>                                                                                           \
  inline void rms_norm_quant_forward<T, TW>(const T* x, const TW* w, void* q, float* scale, int64_t r0, \
                                            int64_t r1, int64_t cols, float eps, bool fp8, float ub) {  \
    detail::rms_norm_quant_##SUFFIX(x, w, q, scale, r0, r1, cols, eps, fp8, ub);                        \
  }
OPFORGE_FOR_EACH_QUANT_TYPE(OPFORGE_BIND_QUANT_ENTRIES)
#undef OPFORGE_BIND_QUANT_ENTRIES
#undef OPFORGE_FOR_EACH_QUANT_TYPE

// The op's binding (cpu_ops.h's calling convention): attributes epsilon, quant_dtype, scale_ub;
// outputs Q and Scale from Forward::outputs (a layer that has not set it passes them as y and h).
struct RMSNormQuantKernel {
  static constexpr const OpDesc& desc = kRMSNormQuantOp;
  template <class T>
  static void forward(const Forward<T>& a, int64_t r0, int64_t r1) {
    void* q = a.outputs != nullptr ? a.outputs[0] : static_cast<void*>(a.y);
    float* scale = static_cast<float*>(a.outputs != nullptr ? a.outputs[1] : static_cast<void*>(a.h));
    const bool fp8 = static_cast<int32_t>(a.attrs[1]) == kQuantFloat8E4M3FN;
    if constexpr (std::is_same_v<T, bfloat16>) {
      if (a.w_float32 != nullptr)
        return rms_norm_quant_forward<T>(a.x, a.w_float32, q, scale, r0, r1, a.cols, a.attrs[0], fp8, a.attrs[2]);
    }
    rms_norm_quant_forward<T>(a.x, a.w, q, scale, r0, r1, a.cols, a.attrs[0], fp8, a.attrs[2]);
  }
};

}  // namespace opforge::kernels::cpu

#ifdef OPFORGE_QUANT_POP_OPTIONS
#pragma GCC pop_options
#undef OPFORGE_QUANT_POP_OPTIONS
#endif
