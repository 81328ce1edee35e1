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

#if defined(__SSE2__) && defined(__GNUC__) && !defined(__CUDACC__)
#include <emmintrin.h>
#define OPFORGE_STREAM_STORES 1
#endif

#include "opforge/kernels/math.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__CUDACC__) && !defined(OPFORGE_NO_CLONES)
#define OPFORGE_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define OPFORGE_CLONES
#endif

#if defined(__clang__)
// Clang refuses `unused` beside target_clones: its unused-function warning is silenced around the
// entries instead (zig's clang builds the loader's plugins for manylinux).
#define OPFORGE_ALWAYS_INLINE inline __attribute__((always_inline))
#define OPFORGE_CPU_ENTRY static OPFORGE_CLONES
#elif defined(__GNUC__)
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
OPFORGE_ALWAYS_INLINE double load(double v) { return v; }
OPFORGE_ALWAYS_INLINE float load(bfloat16 v) { return float_of(uint32_t(v.bits) << 16); }

// Storage from the compute type (float for float/bfloat16, double for double).
template <class T, class V>
OPFORGE_ALWAYS_INLINE T store(V v) {
  return static_cast<T>(v);
}

// Round to nearest even; NaN stays a (quiet) NaN.
template <>
OPFORGE_ALWAYS_INLINE bfloat16 store<bfloat16, float>(float v) {
  const uint32_t u = bits_of(v);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return bfloat16{static_cast<uint16_t>(v != v ? 0x7fc0u : rounded)};
}

// exp(x) for x <= 0, ~1 ulp, branchless: Cody-Waite reduction x = n*ln2 + r, |r| <= ln2/2, and a
// degree-6 minimax polynomial for e^r (relative error 1.9e-9, below float32 rounding; six FMAs).
// Below ln(FLT_MIN) the result flushes to 0, which is what sigmoid needs for |t| up to 1e4 and
// beyond; NaN propagates.
OPFORGE_ALWAYS_INLINE float exp_nonpositive(float x) {
  const float lowest = -87.33654f;
  const float xc = x < lowest ? lowest : x;
  const float rounder = 12582912.0f;  // 1.5 * 2^23: adding and subtracting rounds to an integer
  const float n = (xc * 1.44269504088896341f + rounder) - rounder;
  const float r = (xc - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.38414046e-3f;
  p = p * r + 8.37484188e-3f;
  p = p * r + 4.16681431e-2f;
  p = p * r + 1.66664198e-1f;
  p = p * r + 4.99999911e-1f;
  p = p * r + 1.0f;
  const float e = p * r + 1.0f;
  const float scale = float_of(static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23);
  const float result = e * scale;
  return x < lowest ? 0.0f : result;
}

OPFORGE_ALWAYS_INLINE float fast_sigmoid(float t) {
  const float e = exp_nonpositive(float_of(bits_of(t) | 0x80000000u));  // -|t|, NaN stays NaN
  // A true division on purpose: it runs on the divider, beside the FMA ports this loop saturates.
  // A division-free reciprocal (quadratic start + two Newton steps, same accuracy) adds six FMAs
  // and measured 20-25% slower (AVX-512 clone 0.36 vs 0.29 ns/element, AVX2 0.66 vs 0.53).
  const float r = 1.0f / (1.0f + e);
  return t >= 0.0f ? r : e * r;
}

// float64 is computed exactly (math.h, libm exp and a true division): it serves gradient checks.
OPFORGE_ALWAYS_INLINE double fast_sigmoid(double t) { return sigmoid(t); }

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

template <class T, class TW>
OPFORGE_ALWAYS_INLINE double dot_gw_x(const T* dy, const TW* w, const T* x, int64_t cols) {
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

// An elementwise op (its functor `fn`, math.h's family elementwise): Y = fn.value(X).
template <class T, class Fn>
OPFORGE_ALWAYS_INLINE void elementwise_forward_loop(const T* x, T* y, int64_t n, const Fn& fn) {
  for (int64_t i = 0; i < n; ++i) y[i] = store<T>(fn.value(load(x[i])));
}

// A large output the caller will not read back soon (a reused, cold `out` buffer): non-temporal
// stores skip the read-for-ownership a cached store pays for every line it fills (the third memory
// stream beside X and Y that a copy, memcpy's rep movsb, does not pay), and X is prefetched a few
// KB ahead so its loads overlap the arithmetic. The same loop computes the values, into a buffer
// in L1, so the bits are those of elementwise_forward_loop. A freshly allocated output is another
// matter: the kernel zeroed its pages into the cache, and cached stores are faster there.
constexpr int64_t kStreamBlockBytes = 1024;
constexpr int64_t kPrefetchBytes = 4096;

#if defined(OPFORGE_STREAM_STORES)
template <class T>
OPFORGE_ALWAYS_INLINE void stream_block(T* y, const T* block) {
  auto* to = reinterpret_cast<__m128i*>(y);
  const auto* from = reinterpret_cast<const __m128i*>(block);
  for (int64_t k = 0; k < kStreamBlockBytes / 16; ++k) _mm_stream_si128(to + k, _mm_load_si128(from + k));
}

// A prefetch never faults: past X's end it is a no-op (the address is formed as an integer).
OPFORGE_ALWAYS_INLINE void prefetch_ahead(const void* at) {
  const uintptr_t from = reinterpret_cast<uintptr_t>(at) + kPrefetchBytes;
  for (int64_t line = 0; line < kStreamBlockBytes; line += 64)
    __builtin_prefetch(reinterpret_cast<const void*>(from + line), 0, 3);
}
#endif

template <class T, class Fn>
OPFORGE_ALWAYS_INLINE void elementwise_forward_streamed_loop(const T* x, T* y, int64_t n, const Fn& fn) {
#if defined(OPFORGE_STREAM_STORES)
  const int64_t to_line = ((64 - int64_t(reinterpret_cast<uintptr_t>(y) & 63)) & 63) / int64_t(sizeof(T));
  const int64_t head = to_line < n ? to_line : n;
  elementwise_forward_loop(x, y, head, fn);  // up to Y's first cache line
  constexpr int64_t block = kStreamBlockBytes / int64_t(sizeof(T));
  alignas(64) T buffer[block];
  int64_t i = head;
  for (; i + block <= n; i += block) {
    prefetch_ahead(x + i);
    elementwise_forward_loop(x + i, buffer, block, fn);
    stream_block(y + i, buffer);
  }
  elementwise_forward_loop(x + i, y + i, n - i, fn);
  _mm_sfence();  // streamed stores are weakly ordered: visible before whoever reads Y next
#else
  elementwise_forward_loop(x, y, n, fn);
#endif
}

// dX = dY * fn.slope(X)
template <class T, class Fn>
OPFORGE_ALWAYS_INLINE void elementwise_backward_loop(const T* dy, const T* x, T* dx, int64_t n, const Fn& fn) {
  for (int64_t i = 0; i < n; ++i) dx[i] = store<T>(load(dy[i]) * fn.slope(load(x[i])));
}

// The vectorizable sigmoid (float; float64 exactly) that the CPU instances of the elementwise and
// gated ops' functors (math.h: <Name>Math<S>) use.
struct FastSigmoid {
  template <class C>
  OPFORGE_ALWAYS_INLINE C operator()(C t) const { return fast_sigmoid(t); }
};

// Rows of X [rows, 2d] -> Y [rows, d]: Y = gate(A) * B with A = X[:, :d], B = X[:, d:].
template <class T, class Gate>
OPFORGE_ALWAYS_INLINE void gated_forward_loop(const T* a, T* y, int64_t d, const Gate& gate) {
  const T* b = a + d;
  for (int64_t j = 0; j < d; ++j) y[j] = store<T>(gate.value(load(a[j])) * load(b[j]));
}

// dA = dY * B * gate'(A), dB = dY * gate(A), for one row.
template <class T, class Gate>
OPFORGE_ALWAYS_INLINE void gated_backward_loop(const T* dy, const T* a, T* da, int64_t d,
                                               const Gate& gate) {
  const T* b = a + d;
  T* db = da + d;
  for (int64_t j = 0; j < d; ++j) {
    const auto g = load(dy[j]);
    const auto at_a = gate.slope(load(a[j]));
    da[j] = store<T>(g * load(b[j]) * at_a.slope);
    db[j] = store<T>(g * at_a.value);
  }
}

template <class T, class Gate>
OPFORGE_ALWAYS_INLINE void gated_forward_rows(const T* x, T* y, int64_t row_begin,
                                              int64_t row_end, int64_t d, const Gate& gate) {
  for (int64_t row = row_begin; row < row_end; ++row)
    gated_forward_loop(x + row * 2 * d, y + row * d, d, gate);
}

template <class T, class Gate>
OPFORGE_ALWAYS_INLINE void gated_backward_rows(const T* dy, const T* x, T* dx, int64_t row_begin,
                                               int64_t row_end, int64_t d, const Gate& gate) {
  for (int64_t row = row_begin; row < row_end; ++row)
    gated_backward_loop(dy + row * d, x + row * 2 * d, dx + row * 2 * d, d, gate);
}

// One row formula for every storage type: C is the compute type (float, double for double);
// the sums run in double lanes either way, so they cannot overflow.
template <class T>
using compute_t = decltype(load(T{}));

// A row_norm op (its functor `norm`: Y = X * norm.inverse(mean(X^2)) * W per row). W is T, or
// float with a bfloat16 X (a mixed-dtype call: the row is computed in float either way).
template <class T, class TW, class Norm>
OPFORGE_ALWAYS_INLINE void row_norm_forward_rows(const T* x, const TW* w, T* y, int64_t row_begin,
                                                 int64_t row_end, int64_t cols, const Norm& norm) {
  using C = compute_t<T>;
  for (int64_t row = row_begin; row < row_end; ++row) {
    const T* xr = x + row * cols;
    T* yr = y + row * cols;
    const C inv = static_cast<C>(norm.inverse(sum_squares(xr, cols) / double(cols)));
    for (int64_t j = 0; j < cols; ++j) yr[j] = store<T>(load(xr[j]) * inv * load(w[j]));
  }
}

template <class T, class TW, class Acc, class Norm>
OPFORGE_ALWAYS_INLINE void row_norm_backward_rows(const T* dy, const T* x, const TW* w, T* dx,
                                                  Acc* dw_acc, int64_t row_begin, int64_t row_end,
                                                  int64_t cols, const Norm& norm) {
  using C = compute_t<T>;
  for (int64_t row = row_begin; row < row_end; ++row) {
    const int64_t base = row * cols;
    const double inv_d = norm.inverse(sum_squares(x + base, cols) / double(cols));
    const C inv = static_cast<C>(inv_d);
    // d/dx_i of x_i*inv*w_i summed with dy: inv*dy_i*w_i - x_i*inv^3*mean(dy*w*x)
    const C coef = static_cast<C>(inv_d * inv_d * inv_d *
                                  dot_gw_x(dy + base, w, x + base, cols) / double(cols));
    for (int64_t j = 0; j < cols; ++j) {
      const C xv = load(x[base + j]);
      const C dyv = load(dy[base + j]);
      dx[base + j] = store<T>(inv * dyv * load(w[j]) - xv * coef);
      dw_acc[j] += static_cast<Acc>(dyv * xv * inv);
    }
  }
}

// H = X + R rounded to T, then RMSNorm of that H (the H the caller gets), row by row: H's row is
// still in the cache when it is normalized.
template <class T, class TW, class Norm>
OPFORGE_ALWAYS_INLINE void residual_row_norm_forward_rows(const T* x, const T* r, const TW* w, T* y, T* h,
                                                          int64_t row_begin, int64_t row_end, int64_t cols,
                                                          const Norm& norm) {
  for (int64_t row = row_begin; row < row_end; ++row) {
    const int64_t base = row * cols;
    for (int64_t j = 0; j < cols; ++j) h[base + j] = store<T>(norm.sum(load(x[base + j]), load(r[base + j])));
    row_norm_forward_rows(h, w, y, row, row + 1, cols, norm);
  }
}

// dX = dR = RMSNorm's dX at H, plus dH; dW as RMSNorm's at H. dR's row holds H until it is read.
template <class T, class TW, class Acc, class Norm>
OPFORGE_ALWAYS_INLINE void residual_row_norm_backward_rows(const T* dy, const T* dh, const T* x, const T* r,
                                                           const TW* w, T* dx, T* dr, Acc* dw_acc,
                                                           int64_t row_begin, int64_t row_end, int64_t cols,
                                                           const Norm& norm) {
  using C = compute_t<T>;
  for (int64_t row = row_begin; row < row_end; ++row) {
    const int64_t base = row * cols;
    T* hr = dr + base;
    for (int64_t j = 0; j < cols; ++j) hr[j] = store<T>(norm.sum(load(x[base + j]), load(r[base + j])));
    const double inv_d = norm.inverse(sum_squares(hr, cols) / double(cols));
    const C inv = static_cast<C>(inv_d);
    const C coef = static_cast<C>(inv_d * inv_d * inv_d * dot_gw_x(dy + base, w, hr, cols) / double(cols));
    for (int64_t j = 0; j < cols; ++j) {
      const C hv = load(hr[j]);
      const C dyv = load(dy[base + j]);
      const T g = store<T>(inv * dyv * load(w[j]) - hv * coef + load(dh[base + j]));
      dx[base + j] = g;
      hr[j] = g;
      dw_acc[j] += static_cast<Acc>(dyv * hv * inv);
    }
  }
}

// One non-template, multi-versioned entry per op and storage type (target_clones needs a plain
// function), for every op of each launcher family (the lists OPFORGE_FOR_EACH_<FAMILY>_OP are
// generated from the spec: ops_generated.h); MATH is the op's functor (math.h: <Name>Math).
#define OPFORGE_DEFINE_ELEMENTWISE_ENTRIES(NAME, MATH, T, SUFFIX)                                 \
  OPFORGE_CPU_ENTRY void NAME##_forward_##SUFFIX(const T* x, T* y, int64_t n, MATH fn) {          \
    elementwise_forward_loop(x, y, n, fn);                                                        \
  }                                                                                               \
  OPFORGE_CPU_ENTRY void NAME##_forward_streamed_##SUFFIX(const T* x, T* y, int64_t n, MATH fn) { \
    elementwise_forward_streamed_loop(x, y, n, fn);                                               \
  }                                                                                               \
  OPFORGE_CPU_ENTRY void NAME##_backward_##SUFFIX(const T* dy, const T* x, T* dx, int64_t n,      \
                                                  MATH fn) {                                      \
    elementwise_backward_loop(dy, x, dx, n, fn);                                                  \
  }

// A gated op's entries: the shared gated rows with its gate on the CPU's sigmoid.
#define OPFORGE_DEFINE_GATED_ENTRIES(NAME, MATH, T, SUFFIX)                                       \
  OPFORGE_CPU_ENTRY void NAME##_forward_##SUFFIX(const T* x, T* y, int64_t r0, int64_t r1,        \
                                                 int64_t d, MATH gate) {                          \
    gated_forward_rows(x, y, r0, r1, d, gate);                                                    \
  }                                                                                               \
  OPFORGE_CPU_ENTRY void NAME##_backward_##SUFFIX(const T* dy, const T* x, T* dx, int64_t r0,     \
                                                  int64_t r1, int64_t d, MATH gate) {             \
    gated_backward_rows(dy, x, dx, r0, r1, d, gate);                                              \
  }

#define OPFORGE_DEFINE_ROW_NORM_ENTRIES(NAME, MATH, T, TW, SUFFIX)                                \
  OPFORGE_CPU_ENTRY void NAME##_forward_##SUFFIX(const T* x, const TW* w, T* y, int64_t r0,       \
                                                 int64_t r1, int64_t cols, MATH norm) {           \
    row_norm_forward_rows(x, w, y, r0, r1, cols, norm);                                           \
  }                                                                                               \
  OPFORGE_CPU_ENTRY void NAME##_backward_##SUFFIX(const T* dy, const T* x, const TW* w, T* dx,    \
                                                  float* dw, int64_t r0, int64_t r1, int64_t cols,\
                                                  MATH norm) {                                    \
    row_norm_backward_rows(dy, x, w, dx, dw, r0, r1, cols, norm);                                 \
  }                                                                                               \
  OPFORGE_CPU_ENTRY void NAME##_backward_##SUFFIX(const T* dy, const T* x, const TW* w, T* dx,    \
                                                  double* dw, int64_t r0, int64_t r1,             \
                                                  int64_t cols, MATH norm) {                      \
    row_norm_backward_rows(dy, x, w, dx, dw, r0, r1, cols, norm);                                 \
  }

#define OPFORGE_DEFINE_RESIDUAL_ROW_NORM_ENTRIES(NAME, MATH, T, TW, SUFFIX)                       \
  OPFORGE_CPU_ENTRY void NAME##_forward_##SUFFIX(const T* x, const T* r, const TW* w, T* y, T* h, \
                                                 int64_t r0, int64_t r1, int64_t cols,            \
                                                 MATH norm) {                                     \
    residual_row_norm_forward_rows(x, r, w, y, h, r0, r1, cols, norm);                            \
  }                                                                                               \
  OPFORGE_CPU_ENTRY void NAME##_backward_##SUFFIX(                                                \
      const T* dy, const T* dh, const T* x, const T* r, const TW* w, T* dx, T* dr, float* dw,     \
      int64_t r0, int64_t r1, int64_t cols, MATH norm) {                                          \
    residual_row_norm_backward_rows(dy, dh, x, r, w, dx, dr, dw, r0, r1, cols, norm);             \
  }                                                                                               \
  OPFORGE_CPU_ENTRY void NAME##_backward_##SUFFIX(                                                \
      const T* dy, const T* dh, const T* x, const T* r, const TW* w, T* dx, T* dr, double* dw,    \
      int64_t r0, int64_t r1, int64_t cols, MATH norm) {                                          \
    residual_row_norm_backward_rows(dy, dh, x, r, w, dx, dr, dw, r0, r1, cols, norm);             \
  }

// An op's entries (or bindings, below) for every storage type.
#define OPFORGE_FOR_EACH_CPU_TYPE(EACH, NAME, MATH) \
  EACH(NAME, MATH, float, f32)                      \
  EACH(NAME, MATH, bfloat16, bf16)                  \
  EACH(NAME, MATH, double, f64)

// The row norms' (X's storage type, W's): W of X's type, or float with a bfloat16 X (shapes.h
// weight_dtype_ok).
#define OPFORGE_FOR_EACH_CPU_WEIGHTED_TYPE(EACH, NAME, MATH)                                       \
  EACH(NAME, MATH, float, float, f32)                                                              \
  EACH(NAME, MATH, bfloat16, bfloat16, bf16)                                                       \
  EACH(NAME, MATH, double, double, f64)                                                            \
  EACH(NAME, MATH, bfloat16, float, bf16_wf32)

#define OPFORGE_ELEMENTWISE_ENTRIES(Name, name) \
  OPFORGE_FOR_EACH_CPU_TYPE(OPFORGE_DEFINE_ELEMENTWISE_ENTRIES, name, Name##Math<FastSigmoid>)
#define OPFORGE_GATED_ENTRIES(Name, name) \
  OPFORGE_FOR_EACH_CPU_TYPE(OPFORGE_DEFINE_GATED_ENTRIES, name, Name##Math<FastSigmoid>)
#define OPFORGE_ROW_NORM_ENTRIES(Name, name) \
  OPFORGE_FOR_EACH_CPU_WEIGHTED_TYPE(OPFORGE_DEFINE_ROW_NORM_ENTRIES, name, Name##Math)
#define OPFORGE_RESIDUAL_ROW_NORM_ENTRIES(Name, name) \
  OPFORGE_FOR_EACH_CPU_WEIGHTED_TYPE(OPFORGE_DEFINE_RESIDUAL_ROW_NORM_ENTRIES, name, Name##Math)

#if defined(__clang__)
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wunused-function"
#endif
OPFORGE_FOR_EACH_ELEMENTWISE_OP(OPFORGE_ELEMENTWISE_ENTRIES)
OPFORGE_FOR_EACH_GATED_OP(OPFORGE_GATED_ENTRIES)
OPFORGE_FOR_EACH_ROW_NORM_OP(OPFORGE_ROW_NORM_ENTRIES)
OPFORGE_FOR_EACH_RESIDUAL_ROW_NORM_OP(OPFORGE_RESIDUAL_ROW_NORM_ENTRIES)
#if defined(__clang__)
#pragma clang diagnostic pop
#endif
#undef OPFORGE_ELEMENTWISE_ENTRIES
#undef OPFORGE_GATED_ENTRIES
#undef OPFORGE_ROW_NORM_ENTRIES
#undef OPFORGE_RESIDUAL_ROW_NORM_ENTRIES
#undef OPFORGE_DEFINE_ELEMENTWISE_ENTRIES
#undef OPFORGE_DEFINE_GATED_ENTRIES
#undef OPFORGE_DEFINE_ROW_NORM_ENTRIES
#undef OPFORGE_DEFINE_RESIDUAL_ROW_NORM_ENTRIES

}  // namespace detail

// ---- public API ------------------------------------------------------------------------------

// An output this large (all threads together) does not stay in the caches anyway; smaller ones
// (measured: 16 MiB) are faster through them.
constexpr int64_t kStreamMinBytes = int64_t(32) << 20;
inline bool streaming_pays_off(int64_t output_bytes) { return output_bytes >= kStreamMinBytes; }

// An op's functor on the CPU's sigmoid, for the elementwise and gated families: SwishMath{beta},
// SwiGLUMath{beta}, GeGLUMath{}, ... (math.h)
template <template <class> class Math>
using CpuMath = Math<detail::FastSigmoid>;

// Each family's launchers, for the functor of any op of that family (the instances are the
// multi-versioned entries above). Elementwise ops take a flat range; row ops take rows
// [row_begin, row_end) of a contiguous [rows, cols] tensor (a gated op: X is [rows, 2d], Y is
// [rows, d]).

// Elementwise: Y = fn.value(X), dX = dY * fn.slope(X).
template <class T, class Fn>
void elementwise_forward(const T* x, T* y, int64_t n, const Fn& fn);
// elementwise_forward with non-temporal stores, for a large, reused output
// (elementwise_forward_streamed_loop; streaming_pays_off says when)
template <class T, class Fn>
void elementwise_forward_streamed(const T* x, T* y, int64_t n, const Fn& fn);
template <class T, class Fn>
void elementwise_backward(const T* dy, const T* x, T* dx, int64_t n, const Fn& fn);

// Gated ops (X [rows, 2d] -> Y [rows, d], Y = gate(A) * B).
template <class T, class Gate>
void gated_forward(const T* x, T* y, int64_t row_begin, int64_t row_end, int64_t d, const Gate& gate);
template <class T, class Gate>
void gated_backward(const T* dy, const T* x, T* dx, int64_t row_begin, int64_t row_end, int64_t d,
                    const Gate& gate);

// Row norms: Y = X * norm.inverse(mean(X^2)) * W; the backward adds the rows' dW into dw_acc. W
// is T, or float with a bfloat16 X (OPFORGE_FOR_EACH_CPU_WEIGHTED_TYPE).
template <class T, class TW, class Norm>
void row_norm_forward(const T* x, const TW* w, T* y, int64_t row_begin, int64_t row_end, int64_t cols,
                      const Norm& norm);
template <class T, class TW, class Acc, class Norm>
void row_norm_backward(const T* dy, const T* x, const TW* w, T* dx, Acc* dw_acc, int64_t row_begin,
                       int64_t row_end, int64_t cols, const Norm& norm);

// Residual row norms: H = norm.sum(X, R) (rounded to T) and Y = the row norm of H; the backward
// gives dX and dR (the same values) and adds the rows' dW into dw_acc.
template <class T, class TW, class Norm>
void residual_row_norm_forward(const T* x, const T* r, const TW* w, T* y, T* h, int64_t row_begin,
                               int64_t row_end, int64_t cols, const Norm& norm);
template <class T, class TW, class Acc, class Norm>
void residual_row_norm_backward(const T* dy, const T* dh, const T* x, const T* r, const TW* w, T* dx,
                                T* dr, Acc* dw_acc, int64_t row_begin, int64_t row_end, int64_t cols,
                                const Norm& norm);

#define OPFORGE_BIND_ELEMENTWISE_ENTRIES(NAME, MATH, T, SUFFIX)                                    \
  template <>                                                                                      \
  inline void elementwise_forward<T, MATH>(const T* x, T* y, int64_t n, const MATH& fn) {          \
    detail::NAME##_forward_##SUFFIX(x, y, n, fn);                                                  \
  }                                                                                                \
  template <>                                                                                      \
  inline void elementwise_forward_streamed<T, MATH>(const T* x, T* y, int64_t n, const MATH& fn) { \
    detail::NAME##_forward_streamed_##SUFFIX(x, y, n, fn);                                         \
  }                                                                                                \
  template <>                                                                                      \
  inline void elementwise_backward<T, MATH>(const T* dy, const T* x, T* dx, int64_t n,             \
                                            const MATH& fn) {                                      \
    detail::NAME##_backward_##SUFFIX(dy, x, dx, n, fn);                                            \
  }

#define OPFORGE_BIND_GATED_ENTRIES(NAME, MATH, T, SUFFIX)                                          \
  template <>                                                                                      \
  inline void gated_forward<T, MATH>(const T* x, T* y, int64_t r0, int64_t r1, int64_t d,          \
                                     const MATH& gate) {                                           \
    detail::NAME##_forward_##SUFFIX(x, y, r0, r1, d, gate);                                        \
  }                                                                                                \
  template <>                                                                                      \
  inline void gated_backward<T, MATH>(const T* dy, const T* x, T* dx, int64_t r0, int64_t r1,      \
                                      int64_t d, const MATH& gate) {                               \
    detail::NAME##_backward_##SUFFIX(dy, x, dx, r0, r1, d, gate);                                  \
  }

#define OPFORGE_BIND_ROW_NORM_ENTRIES(NAME, MATH, T, TW, SUFFIX)                                   \
  template <>                                                                                      \
  inline void row_norm_forward<T, TW, MATH>(const T* x, const TW* w, T* y, int64_t r0, int64_t r1, \
                                        int64_t cols, const MATH& norm) {                          \
    detail::NAME##_forward_##SUFFIX(x, w, y, r0, r1, cols, norm);                                  \
  }                                                                                                \
  template <>                                                                                      \
  inline void row_norm_backward<T, TW, float, MATH>(const T* dy, const T* x, const TW* w, T* dx,   \
                                                float* dw, int64_t r0, int64_t r1, int64_t cols,   \
                                                const MATH& norm) {                                \
    detail::NAME##_backward_##SUFFIX(dy, x, w, dx, dw, r0, r1, cols, norm);                        \
  }                                                                                                \
  template <>                                                                                      \
  inline void row_norm_backward<T, TW, double, MATH>(const T* dy, const T* x, const TW* w, T* dx,  \
                                                 double* dw, int64_t r0, int64_t r1, int64_t cols, \
                                                 const MATH& norm) {                               \
    detail::NAME##_backward_##SUFFIX(dy, x, w, dx, dw, r0, r1, cols, norm);                        \
  }

#define OPFORGE_BIND_RESIDUAL_ROW_NORM_ENTRIES(NAME, MATH, T, TW, SUFFIX)                             \
  template <>                                                                                         \
  inline void residual_row_norm_forward<T, TW, MATH>(const T* x, const T* r, const TW* w, T* y, T* h, \
                                                 int64_t r0, int64_t r1, int64_t cols,                \
                                                 const MATH& norm) {                                  \
    detail::NAME##_forward_##SUFFIX(x, r, w, y, h, r0, r1, cols, norm);                               \
  }                                                                                                   \
  template <>                                                                                         \
  inline void residual_row_norm_backward<T, TW, float, MATH>(                                         \
      const T* dy, const T* dh, const T* x, const T* r, const TW* w, T* dx, T* dr, float* dw,         \
      int64_t r0, int64_t r1, int64_t cols, const MATH& norm) {                                       \
    detail::NAME##_backward_##SUFFIX(dy, dh, x, r, w, dx, dr, dw, r0, r1, cols, norm);                \
  }                                                                                                   \
  template <>                                                                                         \
  inline void residual_row_norm_backward<T, TW, double, MATH>(                                        \
      const T* dy, const T* dh, const T* x, const T* r, const TW* w, T* dx, T* dr, double* dw,        \
      int64_t r0, int64_t r1, int64_t cols, const MATH& norm) {                                       \
    detail::NAME##_backward_##SUFFIX(dy, dh, x, r, w, dx, dr, dw, r0, r1, cols, norm);                \
  }

#define OPFORGE_ELEMENTWISE_BINDINGS(Name, name) \
  OPFORGE_FOR_EACH_CPU_TYPE(OPFORGE_BIND_ELEMENTWISE_ENTRIES, name, CpuMath<Name##Math>)
#define OPFORGE_GATED_BINDINGS(Name, name) \
  OPFORGE_FOR_EACH_CPU_TYPE(OPFORGE_BIND_GATED_ENTRIES, name, CpuMath<Name##Math>)
#define OPFORGE_ROW_NORM_BINDINGS(Name, name) \
  OPFORGE_FOR_EACH_CPU_WEIGHTED_TYPE(OPFORGE_BIND_ROW_NORM_ENTRIES, name, Name##Math)
#define OPFORGE_RESIDUAL_ROW_NORM_BINDINGS(Name, name) \
  OPFORGE_FOR_EACH_CPU_WEIGHTED_TYPE(OPFORGE_BIND_RESIDUAL_ROW_NORM_ENTRIES, name, Name##Math)

OPFORGE_FOR_EACH_ELEMENTWISE_OP(OPFORGE_ELEMENTWISE_BINDINGS)
OPFORGE_FOR_EACH_GATED_OP(OPFORGE_GATED_BINDINGS)
OPFORGE_FOR_EACH_ROW_NORM_OP(OPFORGE_ROW_NORM_BINDINGS)
OPFORGE_FOR_EACH_RESIDUAL_ROW_NORM_OP(OPFORGE_RESIDUAL_ROW_NORM_BINDINGS)
#undef OPFORGE_ELEMENTWISE_BINDINGS
#undef OPFORGE_GATED_BINDINGS
#undef OPFORGE_ROW_NORM_BINDINGS
#undef OPFORGE_RESIDUAL_ROW_NORM_BINDINGS
#undef OPFORGE_BIND_ELEMENTWISE_ENTRIES
#undef OPFORGE_BIND_GATED_ENTRIES
#undef OPFORGE_BIND_ROW_NORM_ENTRIES
#undef OPFORGE_BIND_RESIDUAL_ROW_NORM_ENTRIES
#undef OPFORGE_FOR_EACH_CPU_TYPE
#undef OPFORGE_FOR_EACH_CPU_WEIGHTED_TYPE

}  // namespace cpu
}  // namespace opforge::kernels

#ifdef OPFORGE_POP_OPTIONS
#pragma GCC pop_options
#undef OPFORGE_POP_OPTIONS
#endif
