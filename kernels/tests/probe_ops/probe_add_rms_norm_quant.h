// ProbeAddRMSNormQuant's math (a probe op of the residual_row_norm_quant family,
// test_two_file_ops.py): H = X - R.
#pragma once

#include "opforge/kernels/math.h"
#include "opforge/kernels/ops/rms_norm.h"

namespace opforge::kernels {

struct ProbeAddRMSNormQuantMath {
  float eps;
  float quant_dtype;
  float scale_ub;
  template <class C>
  OPFORGE_HD C sum(C x, C r) const { return x - r; }
  template <class C>
  OPFORGE_HD C inverse(C mean_square) const { return rms_inverse(mean_square, C(eps)); }
};

}  // namespace opforge::kernels
