// ProbeSigmoidGLU's math (a probe op of the gated family, test_two_file_ops.py): its gate.
#pragma once

#include "opforge/kernels/math.h"

namespace opforge::kernels {

// gate(a) = sigmoid(a); gate'(a) = s * (1 - s)
template <class S = Sigmoid>
struct ProbeSigmoidGLUMath {
  template <class C>
  OPFORGE_GATE_HD C value(C a) const { return S{}(a); }
  template <class C>
  OPFORGE_GATE_HD GateSlope<C> slope(C a) const {
    const C s = S{}(a);
    return {s, s * (1 - s)};
  }
};

}  // namespace opforge::kernels
