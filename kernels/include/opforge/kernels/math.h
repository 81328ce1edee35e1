// Scalar op math shared by every opforge layer (torch, ONNX Runtime, TensorRT, loader plugins).
// Host and device: the CUDA kernels and the CPU loops call these same functions.
#pragma once

#include <cmath>

#if defined(__CUDACC__)
#define OPFORGE_HD __host__ __device__ __forceinline__
#else
#define OPFORGE_HD inline
#endif

// The gates' members: inlined into the CPU loops too, which vectorize only without a call.
#if defined(__CUDACC__)
#define OPFORGE_GATE_HD OPFORGE_HD
#elif defined(__GNUC__)
#define OPFORGE_GATE_HD inline __attribute__((always_inline))
#else
#define OPFORGE_GATE_HD inline
#endif

namespace opforge::kernels {

// 1 / x for x in [1, 2] or NaN. On the GPU without the IEEE division, whose slow path is a
// subroutine call (a stack frame and spills in the kernel): an approximate reciprocal and one
// Newton step, correctly rounded but within 2^-46 of a tie.
OPFORGE_HD float reciprocal_1_to_2(float x) {
#if defined(__CUDA_ARCH__)
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return fmaf(r, fmaf(-x, r, 1.0f), r);
#else
  return 1.0f / x;
#endif
}

// exp() only ever sees a non-positive argument, so it cannot overflow for any |t|;
// a NaN t stays NaN through every branch.
OPFORGE_HD float sigmoid(float t) {
  const float e = expf(-fabsf(t));
  const float r = reciprocal_1_to_2(1.0f + e);
  return t >= 0.0f ? r : e * r;
}

OPFORGE_HD double sigmoid(double t) {
  const double e = exp(-fabs(t));
  const double r = 1.0 / (1.0 + e);
  return t >= 0.0 ? r : e * r;
}

// Y = X * sigmoid(beta * X)
OPFORGE_HD float swish(float x, float beta) { return x * sigmoid(beta * x); }
OPFORGE_HD double swish(double x, double beta) { return x * sigmoid(beta * x); }

// dY/dX = s + beta * x * s * (1 - s), with s = sigmoid(beta * x)
OPFORGE_HD float swish_grad(float dy, float x, float beta) {
  const float s = sigmoid(beta * x);
  return dy * (s + beta * x * s * (1.0f - s));
}

OPFORGE_HD double swish_grad(double dy, double x, double beta) {
  const double s = sigmoid(beta * x);
  return dy * (s + beta * x * s * (1.0 - s));
}

// ---- gates: a gated op is Y = gate(A) * B, A = X[..., :d], B = X[..., d:] ----------------------
// A gate gives value(a) = gate(a) for the forward and slope(a) = {gate(a), gate'(a)} for the
// backward (dA = dY * B * gate'(A), dB = dY * gate(A)), in the compute type C (float; double on
// the CPU for double). The shared gated launchers (cuda.cuh, cpu.h) take any gate; `S` is the
// sigmoid it is written with: math.h's own here, the CPU loops' vectorizable one there.

struct Sigmoid {
  template <class C>
  OPFORGE_GATE_HD C operator()(C t) const { return sigmoid(t); }
};

template <class C>
struct GateSlope {
  C value;
  C slope;
};

// SwiGLU: gate(a) = swish(a, beta) = a * sigmoid(beta * a); gate'(a) = s + beta * a * s * (1 - s).
template <class S = Sigmoid>
struct SwiGLUGate {
  float beta;
  template <class C>
  OPFORGE_GATE_HD C value(C a) const { return a * S{}(beta * a); }
  template <class C>
  OPFORGE_GATE_HD GateSlope<C> slope(C a) const {
    const C s = S{}(beta * a);
    return {a * s, s + beta * a * s * (1 - s)};
  }
};

// GeGLU: gate(a) = gelu_tanh(a) = 0.5 * a * (1 + tanh(u)), u = sqrt(2/pi) * (a + 0.044715 * a^3)
// (torch's gelu(approximate="tanh")), computed as a * sigmoid(2u), the same value: the sigmoid
// saturates without overflow (a large |a| gives a or -0, a^3 = inf included) and keeps NaN, and no
// 1 + tanh(u) cancels for negative a.
inline constexpr double kTwiceSqrt2OverPi = 2 * 0.7978845608028654;
inline constexpr double kGeluCubic = 0.044715;

// 2u and d(2u)/da
template <class C>
OPFORGE_GATE_HD C gelu_tanh_twice_inner(C a) { return C(kTwiceSqrt2OverPi) * (a + C(kGeluCubic) * a * a * a); }
template <class C>
OPFORGE_GATE_HD C gelu_tanh_twice_inner_slope(C a) {
  return C(kTwiceSqrt2OverPi) * (1 + C(3 * kGeluCubic) * a * a);
}

template <class S = Sigmoid>
struct GeGLUGate {
  template <class C>
  OPFORGE_GATE_HD C value(C a) const { return a * S{}(gelu_tanh_twice_inner(a)); }
  // gate'(a) = s + a * s * (1 - s) * d(2u)/da; the second term is 0 where the sigmoid saturates
  // (a * d(2u)/da may overflow there, and 0 * inf would be NaN).
  template <class C>
  OPFORGE_GATE_HD GateSlope<C> slope(C a) const {
    const C s = S{}(gelu_tanh_twice_inner(a));
    const C spread = s * (1 - s);
    const C through_u = spread == 0 ? C(0) : spread * a * gelu_tanh_twice_inner_slope(a);
    return {a * s, s + through_u};
  }
};

// 1 / sqrt(mean_square + eps); a row of zeros gives 0 (not inf) so that Y is exactly 0 even when
// eps == 0. A NaN mean_square stays NaN.
// On the GPU rsqrtf (2 ulp, no slow-path call; see reciprocal_1_to_2).
OPFORGE_HD float rms_inverse(float mean_square, float eps) {
  const float denom = mean_square + eps;
#if defined(__CUDA_ARCH__)
  return denom == 0.0f ? 0.0f : rsqrtf(denom);
#else
  return denom == 0.0f ? 0.0f : 1.0f / sqrtf(denom);
#endif
}

OPFORGE_HD double rms_inverse(double mean_square, double eps) {
  const double denom = mean_square + eps;
  return denom == 0.0 ? 0.0 : 1.0 / sqrt(denom);
}

}  // namespace opforge::kernels
