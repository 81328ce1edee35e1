// ProbeSoftsign's math (a probe op of the elementwise family, test_two_file_ops.py).
#pragma once

#include "opforge/kernels/math.h"

namespace opforge::kernels {

// Y = X / (1 + alpha * |X|); dY/dX = 1 / (1 + alpha * |X|)^2
template <class S = Sigmoid>
struct ProbeSoftsignMath {
  float alpha;
  template <class C>
  OPFORGE_GATE_HD C value(C x) const { return x / (1 + alpha * (x < 0 ? -x : x)); }
  template <class C>
  OPFORGE_GATE_HD C slope(C x) const {
    const C d = 1 + alpha * (x < 0 ? -x : x);
    return 1 / (d * d);
  }
};

}  // namespace opforge::kernels
