// RMSNormQuant's math (host and device): its functor RMSNormQuantMath (family row_norm_quant:
// quant_rows_cpu.h's and quant_rows_cuda.cuh's launchers, one pass for the row's inverse root mean
// square, one for its max|Y|, one writing Q), and the quantization shared by the quantized rows'
// families: a row's scale from its max|Y| and the quantization of one float32 value by it (round
// half to even, saturate) to int8 or to float8 e4m3fn bits. The spec module
// (opforge_spec/ops/rms_norm_quant.py) says why each step is where it is.
#pragma once

#include <cstdint>
#include <cstring>

#include "opforge/kernels/math.h"  // the shared math; it includes this file
#include "opforge/kernels/ops/rms_norm.h"  // rms_inverse

// OPFORGE_GATE_HD (math.h): always inlined on the host too, so the CPU loops calling these vectorize
// (a call in the loop body kept GCC from it: "statement clobbers memory").

namespace opforge::kernels {

// quant_dtype's values: ONNX TensorProto codes (ElemType), as the spec's DTYPE_CODES.
inline constexpr int32_t kQuantInt8 = 3;
inline constexpr int32_t kQuantFloat8E4M3FN = 17;

struct QuantRange {
  float qmax;       // 127 (int8), 448 (float8 e4m3fn)
  float min_scale;  // vLLM's min_scaling_factor: FLT_EPSILON (int8), 1 / (448 * 512) (float8)
};

OPFORGE_GATE_HD QuantRange quant_range(bool fp8) {
  return fp8 ? QuantRange{448.0f, 1.0f / (448.0f * 512.0f)} : QuantRange{127.0f, 1.1920928955078125e-7f};
}

// max(min(amax, scale_ub) / qmax, min_scale); scale_ub <= 0: no bound. An inf amax gives inf.
OPFORGE_GATE_HD float quant_scale(float amax, float scale_ub, bool fp8) {
  const QuantRange range = quant_range(fp8);
  const float bound = scale_ub > 0.0f && scale_ub < amax ? scale_ub : amax;
  const float scale = bound / range.qmax;
  return scale > range.min_scale ? scale : range.min_scale;
}

OPFORGE_GATE_HD uint32_t quant_bits_of(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

OPFORGE_GATE_HD float quant_float_of(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// Round half to even for |v| <= 2^22 (the CPU loops vectorize it; rintf is a call there).
OPFORGE_GATE_HD float round_half_even(float v) {
#if defined(__CUDA_ARCH__)
  return rintf(v);
#else
  const float magic = 12582912.0f;  // 1.5 * 2^23: the sum's spacing is 1
  return (v + magic) - magic;
#endif
}

// int8: clamp(round_half_even(y * inv_scale), -127, 127); NaN -> 0. Selects, not branches.
OPFORGE_GATE_HD int8_t quant_int8(float y, float inv_scale) {
  float v = y * inv_scale;
  v = v > 127.0f ? 127.0f : v;
  v = v < -127.0f ? -127.0f : v;
  v = v == v ? v : 0.0f;
  return static_cast<int8_t>(static_cast<int32_t>(round_half_even(v)));
}

// float8 e4m3fn bits of y / scale clamped to +-448, round half to even; NaN -> 0x7f.
// Normal range (|v| >= 2^-6): float32's bits rounded at bit 20 (3 mantissa bits kept), exponent
// rebiased 127 -> 7; below it the subnormal code round(|v| * 2^9) (0..8; 8 is 2^-6's code).
OPFORGE_GATE_HD uint8_t quant_fp8_bits(float y, float scale) {
  float v = y / scale;
  const bool nan = v != v;
  v = v > 448.0f ? 448.0f : v;
  v = v < -448.0f ? -448.0f : v;
  const uint32_t u = quant_bits_of(v);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7fffffffu;
  const uint32_t normal = ((a + 0x7ffffu + ((a >> 20) & 1u)) >> 20) - (120u << 3);
  const uint32_t subnormal = static_cast<uint32_t>(round_half_even(quant_float_of(a) * 512.0f));
  const uint32_t code = a >= 0x3c800000u ? normal : subnormal;  // 0x3c800000: 2^-6
  return static_cast<uint8_t>(nan ? 0x7fu : (sign | code));
}

// The row_norm_quant family's functor, its attributes as members: inverse(mean_square) is the row's
// scale as RMSNorm's (Y = X * inverse * W in float32), quant_dtype (kQuantInt8 or
// kQuantFloat8E4M3FN) Q's dtype and scale_ub the bound on max|Y| (0: none), both read by the
// launchers.
struct RMSNormQuantMath {
  float eps;
  float quant_dtype;
  float scale_ub;
  template <class C>
  OPFORGE_HD C inverse(C mean_square) const { return rms_inverse(mean_square, C(eps)); }
};

// Whether a quantized-rows functor's Q is float8 e4m3fn (else int8).
template <class Norm>
OPFORGE_HD bool quant_fp8(const Norm& norm) {
  return static_cast<int32_t>(norm.quant_dtype) == kQuantFloat8E4M3FN;
}

}  // namespace opforge::kernels
