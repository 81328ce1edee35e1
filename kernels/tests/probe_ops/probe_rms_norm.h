// ProbeRMSNorm's math (a probe op of the row_norm family, test_two_file_ops.py).
#pragma once

#include "opforge/kernels/math.h"
#include "opforge/kernels/ops/rms_norm.h"

namespace opforge::kernels {

struct ProbeRMSNormMath {
  float eps;
  template <class C>
  OPFORGE_HD C inverse(C mean_square) const { return rms_inverse(mean_square, C(eps)); }
};

}  // namespace opforge::kernels
