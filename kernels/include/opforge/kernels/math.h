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

// exp() only ever sees a non-positive argument, so it cannot overflow for any |t|;
// a NaN t stays NaN through every branch.
OPFORGE_HD float sigmoid(float t) {
  const float e = expf(-fabsf(t));
  const float r = 1.0f / (1.0f + e);
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
OPFORGE_HD float rms_inverse(float mean_square, float eps) {
  const float denom = mean_square + eps;
  return denom == 0.0f ? 0.0f : 1.0f / sqrtf(denom);
}

OPFORGE_HD double rms_inverse(double mean_square, double eps) {
  const double denom = mean_square + eps;
  return denom == 0.0 ? 0.0 : 1.0 / sqrt(denom);
}

}  // namespace opforge::kernels
