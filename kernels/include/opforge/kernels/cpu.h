// Vectorized CPU loops for the opforge ops. Threading is the caller's job: call these on
// sub-ranges (elementwise) or row blocks (RMSNorm) from the host runtime's own thread pool.
//
// The loops are written so that GCC and Clang auto-vectorize them: a branchless exp, selects
// instead of branches, several independent accumulators for reductions. Each float loop is
// compiled for x86-64-v4 (AVX-512), x86-64-v3 (AVX2+FMA) and baseline x86-64 and picked at load
// time (target_clones), so a portable wheel still runs at the machine's vector width.
#pragma once

#include <cstdint>
#include <cstring>

#include "opforge/kernels/math.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__CUDACC__) && !defined(OPFORGE_NO_CLONES)
#define OPFORGE_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define OPFORGE_CLONES
#endif

#if defined(__GNUC__)
#define OPFORGE_ALWAYS_INLINE inline __attribute__((always_inline))
#define OPFORGE_CPU_ENTRY static __attribute__((unused)) OPFORGE_CLONES
#else
#define OPFORGE_ALWAYS_INLINE inline
#define OPFORGE_CPU_ENTRY static
#endif

// GCC will not if-convert a select whose arms it would have to speculate under -ftrapping-math,
// and after jump threading every `?:` below becomes such a branch: the loops then stay scalar
// on AVX2 (AVX-512 masks hide it). Traps are never enabled here, so the kernels opt out; values
// (NaN, Inf, rounding) are unchanged. -O2's "very cheap" cost model also skips loops that need an
// epilogue, so vectorization is asked for with the dynamic cost model whatever the caller's -O.
#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#pragma GCC push_options
#pragma GCC optimize("no-trapping-math", "tree-vectorize", "vect-cost-model=dynamic")
#define OPFORGE_POP_OPTIONS
#endif

namespace opforge::kernels {

// 16-bit brain float, layout-compatible with c10::BFloat16 (reinterpret_cast pointers to it).
struct bfloat16 {
  uint16_t bits;
};

namespace cpu {
namespace detail {

OPFORGE_ALWAYS_INLINE uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

OPFORGE_ALWAYS_INLINE float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

OPFORGE_ALWAYS_INLINE float load(float v) { return v; }
OPFORGE_ALWAYS_INLINE float load(bfloat16 v) { return float_of(uint32_t(v.bits) << 16); }

template <class T>
OPFORGE_ALWAYS_INLINE T store(float v);

template <>
OPFORGE_ALWAYS_INLINE float store<float>(float v) {
  return v;
}

// Round to nearest even; NaN stays a (quiet) NaN.
template <>
OPFORGE_ALWAYS_INLINE bfloat16 store<bfloat16>(float v) {
  const uint32_t u = bits_of(v);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return bfloat16{static_cast<uint16_t>(v != v ? 0x7fc0u : rounded)};
}

// exp(x) for x <= 0, ~1 ulp, branchless (Cody-Waite reduction + degree-6 polynomial).
// Below ln(FLT_MIN) the result flushes to 0, which is what sigmoid needs for |t| up to 1e4 and
// beyond; NaN propagates.
OPFORGE_ALWAYS_INLINE float exp_nonpositive(float x) {
  const float lowest = -87.33654f;
  const float xc = x < lowest ? lowest : x;
  const float rounder = 12582912.0f;  // 1.5 * 2^23: adding and subtracting rounds to an integer
  const float n = (xc * 1.44269504088896341f + rounder) - rounder;
  const float r = (xc - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e = p * r * r + r + 1.0f;
  const float scale = float_of(static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23);
  const float result = e * scale;
  return x < lowest ? 0.0f : result;
}

OPFORGE_ALWAYS_INLINE float fast_sigmoid(float t) {
  const float e = exp_nonpositive(t < 0.0f ? t : -t);
  const float r = 1.0f / (1.0f + e);
  return t >= 0.0f ? r : e * r;
}

OPFORGE_ALWAYS_INLINE float fast_swish(float x, float beta) { return x * fast_sigmoid(beta * x); }

OPFORGE_ALWAYS_INLINE float fast_swish_grad(float dy, float x, float beta) {
  const float s = fast_sigmoid(beta * x);
  return dy * (s + beta * x * s * (1.0f - s));
}

constexpr int kLanes = 16;

// Sum of squares of one row in double lanes: overflow-free for any float input.
template <class T>
OPFORGE_ALWAYS_INLINE double sum_squares(const T* x, int64_t cols) {
  double lanes[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= cols; j += kLanes) {
    for (int k = 0; k < kLanes; ++k) {
      const double v = load(x[j + k]);
      lanes[k] += v * v;
    }
  }
  double total = 0.0;
  for (; j < cols; ++j) {
    const double v = load(x[j]);
    total += v * v;
  }
  for (int k = 0; k < kLanes; ++k) total += lanes[k];
  return total;
}

template <class T>
OPFORGE_ALWAYS_INLINE double dot_gw_x(const T* dy, const T* w, const T* x, int64_t cols) {
  double lanes[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= cols; j += kLanes) {
    for (int k = 0; k < kLanes; ++k) {
      lanes[k] += double(load(dy[j + k])) * double(load(w[j + k])) * double(load(x[j + k]));
    }
  }
  double total = 0.0;
  for (; j < cols; ++j) total += double(load(dy[j])) * double(load(w[j])) * double(load(x[j]));
  for (int k = 0; k < kLanes; ++k) total += lanes[k];
  return total;
}

template <class T>
OPFORGE_ALWAYS_INLINE void swish_forward_loop(const T* x, T* y, int64_t n, float beta) {
  for (int64_t i = 0; i < n; ++i) y[i] = store<T>(fast_swish(load(x[i]), beta));
}

template <class T>
OPFORGE_ALWAYS_INLINE void swish_backward_loop(const T* dy, const T* x, T* dx, int64_t n,
                                               float beta) {
  for (int64_t i = 0; i < n; ++i) dx[i] = store<T>(fast_swish_grad(load(dy[i]), load(x[i]), beta));
}

template <class T>
OPFORGE_ALWAYS_INLINE void rms_norm_forward_rows(const T* x, const T* w, T* y, int64_t row_begin,
                                                 int64_t row_end, int64_t cols, float eps) {
  for (int64_t row = row_begin; row < row_end; ++row) {
    const T* xr = x + row * cols;
    T* yr = y + row * cols;
    const float inv = static_cast<float>(rms_inverse(sum_squares(xr, cols) / double(cols), double(eps)));
    for (int64_t j = 0; j < cols; ++j) yr[j] = store<T>(load(xr[j]) * inv * load(w[j]));
  }
}

template <class T, class Acc>
OPFORGE_ALWAYS_INLINE void rms_norm_backward_rows(const T* dy, const T* x, const T* w, T* dx,
                                                  Acc* dw_acc, int64_t row_begin, int64_t row_end,
                                                  int64_t cols, float eps) {
  for (int64_t row = row_begin; row < row_end; ++row) {
    const int64_t base = row * cols;
    const double inv_d = rms_inverse(sum_squares(x + base, cols) / double(cols), double(eps));
    const float inv = static_cast<float>(inv_d);
    // d/dx_i of x_i*inv*w_i summed with dy: inv*dy_i*w_i - x_i*inv^3*mean(dy*w*x)
    const float coef = static_cast<float>(inv_d * inv_d * inv_d *
                                          dot_gw_x(dy + base, w, x + base, cols) / double(cols));
    for (int64_t j = 0; j < cols; ++j) {
      const float xv = load(x[base + j]);
      const float dyv = load(dy[base + j]);
      dx[base + j] = store<T>(inv * dyv * load(w[j]) - xv * coef);
      dw_acc[j] += static_cast<Acc>(dyv * xv * inv);
    }
  }
}

// One non-template, multi-versioned entry per storage type: target_clones needs a plain function.
#define OPFORGE_DEFINE_CPU_ENTRIES(T, SUFFIX)                                                     \
  OPFORGE_CPU_ENTRY void swish_forward_##SUFFIX(const T* x, T* y, int64_t n, float beta) {    \
    swish_forward_loop(x, y, n, beta);                                                            \
  }                                                                                               \
  OPFORGE_CPU_ENTRY void swish_backward_##SUFFIX(const T* dy, const T* x, T* dx, int64_t n,   \
                                                     float beta) {                                \
    swish_backward_loop(dy, x, dx, n, beta);                                                      \
  }                                                                                               \
  OPFORGE_CPU_ENTRY void rms_norm_forward_##SUFFIX(const T* x, const T* w, T* y, int64_t r0,  \
                                                       int64_t r1, int64_t cols, float eps) {     \
    rms_norm_forward_rows(x, w, y, r0, r1, cols, eps);                                            \
  }                                                                                               \
  OPFORGE_CPU_ENTRY void rms_norm_backward_##SUFFIX(const T* dy, const T* x, const T* w,      \
                                                        T* dx, float* dw, int64_t r0, int64_t r1, \
                                                        int64_t cols, float eps) {                \
    rms_norm_backward_rows(dy, x, w, dx, dw, r0, r1, cols, eps);                                  \
  }                                                                                               \
  OPFORGE_CPU_ENTRY void rms_norm_backward_##SUFFIX(const T* dy, const T* x, const T* w,      \
                                                        T* dx, double* dw, int64_t r0,            \
                                                        int64_t r1, int64_t cols, float eps) {    \
    rms_norm_backward_rows(dy, x, w, dx, dw, r0, r1, cols, eps);                                  \
  }

OPFORGE_DEFINE_CPU_ENTRIES(float, f32)
OPFORGE_DEFINE_CPU_ENTRIES(bfloat16, bf16)
#undef OPFORGE_DEFINE_CPU_ENTRIES

}  // namespace detail

// ---- public API ------------------------------------------------------------------------------

template <class T>
void swish_forward(const T* x, T* y, int64_t n, float beta);
template <class T>
void swish_backward(const T* dy, const T* x, T* dx, int64_t n, float beta);
template <class T>
void rms_norm_forward(const T* x, const T* w, T* y, int64_t row_begin, int64_t row_end,
                      int64_t cols, float eps);
template <class T, class Acc>
void rms_norm_backward(const T* dy, const T* x, const T* w, T* dx, Acc* dw_acc, int64_t row_begin,
                       int64_t row_end, int64_t cols, float eps);

#define OPFORGE_BIND_CPU_ENTRIES(T, SUFFIX)                                                        \
  template <>                                                                                      \
  inline void swish_forward<T>(const T* x, T* y, int64_t n, float beta) {                          \
    detail::swish_forward_##SUFFIX(x, y, n, beta);                                                 \
  }                                                                                                \
  template <>                                                                                      \
  inline void swish_backward<T>(const T* dy, const T* x, T* dx, int64_t n, float beta) {           \
    detail::swish_backward_##SUFFIX(dy, x, dx, n, beta);                                           \
  }                                                                                                \
  template <>                                                                                      \
  inline void rms_norm_forward<T>(const T* x, const T* w, T* y, int64_t r0, int64_t r1,            \
                                  int64_t cols, float eps) {                                       \
    detail::rms_norm_forward_##SUFFIX(x, w, y, r0, r1, cols, eps);                                 \
  }                                                                                                \
  template <>                                                                                      \
  inline void rms_norm_backward<T, float>(const T* dy, const T* x, const T* w, T* dx, float* dw,   \
                                          int64_t r0, int64_t r1, int64_t cols, float eps) {       \
    detail::rms_norm_backward_##SUFFIX(dy, x, w, dx, dw, r0, r1, cols, eps);                       \
  }                                                                                                \
  template <>                                                                                      \
  inline void rms_norm_backward<T, double>(const T* dy, const T* x, const T* w, T* dx, double* dw, \
                                           int64_t r0, int64_t r1, int64_t cols, float eps) {      \
    detail::rms_norm_backward_##SUFFIX(dy, x, w, dx, dw, r0, r1, cols, eps);                       \
  }

OPFORGE_BIND_CPU_ENTRIES(float, f32)
OPFORGE_BIND_CPU_ENTRIES(bfloat16, bf16)
#undef OPFORGE_BIND_CPU_ENTRIES

// float64: scalar math in double (used for gradient checks, not for speed).
template <>
inline void swish_forward<double>(const double* x, double* y, int64_t n, float beta) {
  for (int64_t i = 0; i < n; ++i) y[i] = swish(x[i], double(beta));
}

template <>
inline void swish_backward<double>(const double* dy, const double* x, double* dx, int64_t n,
                                   float beta) {
  for (int64_t i = 0; i < n; ++i) dx[i] = swish_grad(dy[i], x[i], double(beta));
}

template <>
inline void rms_norm_forward<double>(const double* x, const double* w, double* y,
                                     int64_t row_begin, int64_t row_end, int64_t cols, float eps) {
  for (int64_t row = row_begin; row < row_end; ++row) {
    const double* xr = x + row * cols;
    double sum = 0.0;
    for (int64_t j = 0; j < cols; ++j) sum += xr[j] * xr[j];
    const double inv = rms_inverse(sum / double(cols), double(eps));
    for (int64_t j = 0; j < cols; ++j) y[row * cols + j] = xr[j] * inv * w[j];
  }
}

template <>
inline void rms_norm_backward<double, double>(const double* dy, const double* x, const double* w,
                                              double* dx, double* dw_acc, int64_t row_begin,
                                              int64_t row_end, int64_t cols, float eps) {
  for (int64_t row = row_begin; row < row_end; ++row) {
    const int64_t base = row * cols;
    double sum = 0.0, dot = 0.0;
    for (int64_t j = 0; j < cols; ++j) {
      sum += x[base + j] * x[base + j];
      dot += dy[base + j] * w[j] * x[base + j];
    }
    const double inv = rms_inverse(sum / double(cols), double(eps));
    const double coef = inv * inv * inv * dot / double(cols);
    for (int64_t j = 0; j < cols; ++j) {
      dx[base + j] = inv * dy[base + j] * w[j] - x[base + j] * coef;
      dw_acc[j] += dy[base + j] * x[base + j] * inv;
    }
  }
}

}  // namespace cpu
}  // namespace opforge::kernels

#ifdef OPFORGE_POP_OPTIONS
#pragma GCC pop_options
#undef OPFORGE_POP_OPTIONS
#endif
