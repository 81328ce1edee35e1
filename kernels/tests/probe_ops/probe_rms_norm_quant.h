// ProbeRMSNormQuant's math (a probe op of the row_norm_quant family, test_two_file_ops.py): half
// RMSNorm's inverse.
#pragma once

#include "opforge/kernels/math.h"
#include "opforge/kernels/ops/rms_norm.h"

namespace opforge::kernels {

struct ProbeRMSNormQuantMath {
  float eps;
  float quant_dtype;
  float scale_ub;
  template <class C>
  OPFORGE_HD C inverse(C mean_square) const { return C(0.5) * rms_inverse(mean_square, C(eps)); }
};

}  // namespace opforge::kernels
