// SwiGLU's math (host and device): its gate. Family gated: the shared gated launchers (cpu.h and
// cuda.cuh gated_forward / gated_backward) run its gate, the functor <Name>Math.
#pragma once

#include "opforge/kernels/math.h"  // the shared math (sigmoid, GateSlope); it includes this file

namespace opforge::kernels {

// SwiGLU: gate(a) = swish(a, beta) = a * sigmoid(beta * a); gate'(a) = s + beta * a * s * (1 - s).
template <class S = Sigmoid>
struct SwiGLUMath {
  float beta;
  template <class C>
  OPFORGE_GATE_HD C value(C a) const { return a * S{}(beta * a); }
  template <class C>
  OPFORGE_GATE_HD GateSlope<C> slope(C a) const {
    const C s = S{}(beta * a);
    return {a * s, s + beta * a * s * (1 - s)};
  }
};

}  // namespace opforge::kernels
