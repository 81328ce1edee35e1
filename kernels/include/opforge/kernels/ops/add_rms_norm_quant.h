// AddRMSNormQuant's math (host and device): H = X + R, rounded to the storage type once, then
// RMSNormQuant of that H (rms_norm_quant.h's quantization). Family residual_row_norm_quant:
// quant_rows_cpu.h's and quant_rows_cuda.cuh's launchers.
#pragma once

#include "opforge/kernels/math.h"  // the shared math; it includes this file
#include "opforge/kernels/ops/add_rms_norm.h"  // residual_sum
#include "opforge/kernels/ops/rms_norm.h"      // rms_inverse

namespace opforge::kernels {

// The residual_row_norm_quant family's functor: sum(x, r) is one element of H, inverse(mean_square)
// H's row scale as RMSNorm's; quant_dtype and scale_ub as RMSNormQuantMath's.
struct AddRMSNormQuantMath {
  float eps;
  float quant_dtype;
  float scale_ub;
  template <class C>
  OPFORGE_HD C sum(C x, C r) const { return residual_sum(x, r); }
  template <class C>
  OPFORGE_HD C inverse(C mean_square) const { return rms_inverse(mean_square, C(eps)); }
};

}  // namespace opforge::kernels
