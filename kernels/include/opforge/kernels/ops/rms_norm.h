// RMSNorm's math (host and device): the row's inverse root mean square. Family row_norm: Y = X *
// inverse(mean(X^2)) * W per row, by cpu.h's and cuda.cuh's row_norm launchers.
#pragma once

#include "opforge/kernels/math.h"  // the shared math (sigmoid, GateSlope); it includes this file

namespace opforge::kernels {

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

// The row_norm family's functor, its attributes as members: inverse(mean_square) is the row's scale
// (float on the GPU, double on the CPU). The backward takes its derivative as -inverse^3 / 2 (an
// inverse square root's).
struct RMSNormMath {
  float eps;
  template <class C>
  OPFORGE_HD C inverse(C mean_square) const { return rms_inverse(mean_square, C(eps)); }
};

}  // namespace opforge::kernels
