// The quantized rows' launcher families on the CPU: row_norm_quant (X, W -> Q, Scale: RMSNormQuant)
// and residual_row_norm_quant (X, R, W -> Q, Scale, H: AddRMSNormQuant). Per row the op's
// norm.inverse of the mean square (float64 sums, as the row norms'), max|Y| and Q with the row's
// scale (ops/rms_norm_quant.h), Y recomputed in each pass from X (or H) and W (two multiplies:
// cheaper than a row buffer's traffic). The functor (<Name>Math) gives inverse(mean_square),
// quant_dtype and scale_ub, and sum(x, r) for the residual family. Threading is the caller's
// (rows [r0, r1)); the float loops are multi-versioned per op as cpu.h's.
// Their bindings (RowNormQuantKernel, ResidualRowNormQuantKernel) are cpu_ops.h's.
#pragma once

#include <cstdint>

#include "opforge/kernels/cpu.h"
#include "opforge/kernels/shapes.h"

#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#pragma GCC push_options
#pragma GCC optimize("no-trapping-math", "tree-vectorize", "vect-cost-model=dynamic")
#define OPFORGE_QUANT_POP_OPTIONS
#endif

namespace opforge::kernels::cpu {

// Rows [r0, r1) of a contiguous [rows, cols] X: Q (int8, or float8 e4m3fn bits by
// norm.quant_dtype) and the rows' float32 scales. W is T, or float with a bfloat16 X.
template <class T, class TW, class Norm>
void row_norm_quant_forward(const T* x, const TW* w, void* q, float* scale, int64_t r0, int64_t r1,
                            int64_t cols, const Norm& norm);
// The same of H = norm.sum(X, R) rounded to T, which is written too (H may be R itself).
template <class T, class TW, class Norm>
void residual_row_norm_quant_forward(const T* x, const T* r, const TW* w, void* q, float* scale, T* h,
                                     int64_t r0, int64_t r1, int64_t cols, const Norm& norm);

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

// Rows [r0, r1) of X [rows, cols]: scale[row] and Q's row (int8, or float8 e4m3fn bits).
template <class T, class TW, class Norm>
OPFORGE_ALWAYS_INLINE void row_norm_quant_rows(const T* x, const TW* w, void* q, float* scale, int64_t r0,
                                               int64_t r1, int64_t cols, const Norm& norm) {
  using C = compute_t<T>;
  const bool fp8 = quant_fp8(norm);
  for (int64_t row = r0; row < r1; ++row) {
    const T* xr = x + row * cols;
    const double mean_square = cols == 0 ? 0.0 : sum_squares(xr, cols) / double(cols);
    const C inv = static_cast<C>(static_cast<float>(norm.inverse(mean_square)));
    const float s = quant_scale(quant_row_amax(xr, w, inv, cols), norm.scale_ub, fp8);
    scale[row] = s;
    if (fp8) {
      quant_row_fp8(xr, w, inv, s, static_cast<uint8_t*>(q) + row * cols, cols);
    } else {
      quant_row_int8(xr, w, inv, s, static_cast<int8_t*>(q) + row * cols, cols);
    }
  }
}

// H's row rounded to T first (each element of X and R read before H's is written), then that row
// quantized while it is still in the cache.
template <class T, class TW, class Norm>
OPFORGE_ALWAYS_INLINE void residual_row_norm_quant_rows(const T* x, const T* r, const TW* w, void* q, float* scale,
                                                        T* h, int64_t r0, int64_t r1, int64_t cols,
                                                        const Norm& norm) {
  for (int64_t row = r0; row < r1; ++row) {
    const int64_t base = row * cols;
    for (int64_t j = 0; j < cols; ++j) h[base + j] = store<T>(norm.sum(load(x[base + j]), load(r[base + j])));
    row_norm_quant_rows(h, w, q, scale, row, row + 1, cols, norm);
  }
}

// One multi-versioned entry per op and (X's type, W's type): W of X's type, or float with a
// bfloat16 X; for every op of each quantized family (OPFORGE_FOR_EACH_<FAMILY>_OP, generated).
#define OPFORGE_FOR_EACH_QUANT_TYPE(EACH, NAME, MATH) \
  EACH(NAME, MATH, float, float, f32)                 \
  EACH(NAME, MATH, bfloat16, bfloat16, bf16)          \
  EACH(NAME, MATH, double, double, f64)               \
  EACH(NAME, MATH, bfloat16, float, bf16_wf32)

#define OPFORGE_DEFINE_ROW_NORM_QUANT_ENTRY(NAME, MATH, T, TW, SUFFIX)                                  \
  OPFORGE_CPU_ENTRY void NAME##_forward_##SUFFIX(const T* x, const TW* w, void* q, float* scale,        \
                                                 int64_t r0, int64_t r1, int64_t cols, MATH norm) {     \
    row_norm_quant_rows(x, w, q, scale, r0, r1, cols, norm);                                            \
  }
#define OPFORGE_DEFINE_RESIDUAL_ROW_NORM_QUANT_ENTRY(NAME, MATH, T, TW, SUFFIX)                         \
  OPFORGE_CPU_ENTRY void NAME##_forward_##SUFFIX(const T* x, const T* r, const TW* w, void* q,          \
                                                 float* scale, T* h, int64_t r0, int64_t r1,            \
                                                 int64_t cols, MATH norm) {                             \
    residual_row_norm_quant_rows(x, r, w, q, scale, h, r0, r1, cols, norm);                             \
  }
#define OPFORGE_ROW_NORM_QUANT_ENTRIES(Name, name) \
  OPFORGE_FOR_EACH_QUANT_TYPE(OPFORGE_DEFINE_ROW_NORM_QUANT_ENTRY, name, Name##Math)
#define OPFORGE_RESIDUAL_ROW_NORM_QUANT_ENTRIES(Name, name) \
  OPFORGE_FOR_EACH_QUANT_TYPE(OPFORGE_DEFINE_RESIDUAL_ROW_NORM_QUANT_ENTRY, name, Name##Math)

#if defined(__clang__)
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wunused-function"
#endif
OPFORGE_FOR_EACH_ROW_NORM_QUANT_OP(OPFORGE_ROW_NORM_QUANT_ENTRIES)
OPFORGE_FOR_EACH_RESIDUAL_ROW_NORM_QUANT_OP(OPFORGE_RESIDUAL_ROW_NORM_QUANT_ENTRIES)
#if defined(__clang__)
#pragma clang diagnostic pop
#endif
#undef OPFORGE_ROW_NORM_QUANT_ENTRIES
#undef OPFORGE_RESIDUAL_ROW_NORM_QUANT_ENTRIES
#undef OPFORGE_DEFINE_ROW_NORM_QUANT_ENTRY
#undef OPFORGE_DEFINE_RESIDUAL_ROW_NORM_QUANT_ENTRY

}  // namespace detail

#define OPFORGE_BIND_ROW_NORM_QUANT_ENTRY(NAME, MATH, T, TW, SUFFIX)                                      \
  template <>                                                                                             \
  inline void row_norm_quant_forward<T, TW, MATH>(const T* x, const TW* w, void* q, float* scale,         \
                                                  int64_t r0, int64_t r1, int64_t cols, const MATH& norm) { \
    detail::NAME##_forward_##SUFFIX(x, w, q, scale, r0, r1, cols, norm);                                  \
  }
#define OPFORGE_BIND_RESIDUAL_ROW_NORM_QUANT_ENTRY(NAME, MATH, T, TW, SUFFIX)                             \
  template <>                                                                                             \
  inline void residual_row_norm_quant_forward<T, TW, MATH>(const T* x, const T* r, const TW* w, void* q,  \
                                                           float* scale, T* h, int64_t r0, int64_t r1,    \
                                                           int64_t cols, const MATH& norm) {              \
    detail::NAME##_forward_##SUFFIX(x, r, w, q, scale, h, r0, r1, cols, norm);                            \
  }
#define OPFORGE_ROW_NORM_QUANT_BINDINGS(Name, name) \
  OPFORGE_FOR_EACH_QUANT_TYPE(OPFORGE_BIND_ROW_NORM_QUANT_ENTRY, name, Name##Math)
#define OPFORGE_RESIDUAL_ROW_NORM_QUANT_BINDINGS(Name, name) \
  OPFORGE_FOR_EACH_QUANT_TYPE(OPFORGE_BIND_RESIDUAL_ROW_NORM_QUANT_ENTRY, name, Name##Math)
OPFORGE_FOR_EACH_ROW_NORM_QUANT_OP(OPFORGE_ROW_NORM_QUANT_BINDINGS)
OPFORGE_FOR_EACH_RESIDUAL_ROW_NORM_QUANT_OP(OPFORGE_RESIDUAL_ROW_NORM_QUANT_BINDINGS)
#undef OPFORGE_ROW_NORM_QUANT_BINDINGS
#undef OPFORGE_RESIDUAL_ROW_NORM_QUANT_BINDINGS
#undef OPFORGE_BIND_ROW_NORM_QUANT_ENTRY
#undef OPFORGE_BIND_RESIDUAL_ROW_NORM_QUANT_ENTRY
#undef OPFORGE_FOR_EACH_QUANT_TYPE

}  // namespace opforge::kernels::cpu

#ifdef OPFORGE_QUANT_POP_OPTIONS
#pragma GCC pop_options
#undef OPFORGE_QUANT_POP_OPTIONS
#endif
