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

}  // namespace opforge::kernels

// Each op's own math (kernels/include/opforge/kernels/ops/<op>.h), one include per op of the spec.
#include "opforge/kernels/ops_math_generated.h"
