// AddRMSNorm's math (host and device): H = X + R, rounded to the storage type once, then RMSNorm
// of that H (rms_norm.h). Family residual_row_norm: cpu.h's and cuda.cuh's residual_row_norm
// launchers.
#pragma once

#include "opforge/kernels/math.h"  // the shared math (sigmoid, GateSlope); it includes this file
#include "opforge/kernels/ops/rms_norm.h"  // rms_inverse

namespace opforge::kernels {

// One element of H in the compute type (float; double for double): the kernels round it to X's
// type and normalize the rounded row.
template <class C>
OPFORGE_HD C residual_sum(C x, C r) {
  return x + r;
}

// The residual_row_norm family's functor: sum(x, r) is one element of H (its derivative 1 for both),
// inverse(mean_square) H's row scale as row_norm's.
struct AddRMSNormMath {
  float eps;
  template <class C>
  OPFORGE_HD C sum(C x, C r) const { return residual_sum(x, r); }
  template <class C>
  OPFORGE_HD C inverse(C mean_square) const { return rms_inverse(mean_square, C(eps)); }
};

}  // namespace opforge::kernels
