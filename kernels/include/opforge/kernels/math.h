// Scalar op math shared by every opforge layer (torch, ONNX Runtime, TensorRT, loader plugins).
// Host and device: the CUDA kernels and the CPU loops call these same functions.
#pragma once

#include <cmath>

#if defined(__CUDACC__)
#define OPFORGE_HD __host__ __device__ __forceinline__
#else
#define OPFORGE_HD inline
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

// SwiGLU on one (a, b) pair, a from X[..., :d], b from X[..., d:]: Y = swish(a, beta) * b.
OPFORGE_HD float swiglu(float a, float b, float beta) { return swish(a, beta) * b; }
OPFORGE_HD double swiglu(double a, double b, double beta) { return swish(a, beta) * b; }

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
