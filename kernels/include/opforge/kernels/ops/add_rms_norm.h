// AddRMSNorm's math (host and device): H = X + R, rounded to the storage type once, then RMSNorm
// of that H (rms_norm.h). Launch shape: row reduction with a residual (cpu.h's add_rms_norm rows,
// cuda.cuh's row kernels with kResidual).
#pragma once

#include "opforge/kernels/math.h"  // the shared math (sigmoid, GateSlope); it includes this file

namespace opforge::kernels {

// One element of H in the compute type (float; double for double): the kernels round it to X's
// type and normalize the rounded row.
template <class C>
OPFORGE_HD C residual_sum(C x, C r) {
  return x + r;
}

}  // namespace opforge::kernels
