// GeGLU's math (host and device): its gate. Family gated: the shared gated launchers (cpu.h and
// cuda.cuh gated_forward / gated_backward) run its gate, the functor <Name>Math.
#pragma once

#include "opforge/kernels/math.h"  // the shared math (sigmoid, GateSlope); it includes this file

namespace opforge::kernels {

// GeGLU: gate(a) = gelu_tanh(a) = 0.5 * a * (1 + tanh(u)), u = sqrt(2/pi) * (a + 0.044715 * a^3)
// (torch's gelu(approximate="tanh")), computed as a * sigmoid(2u), the same value: the sigmoid
// saturates without overflow (a large |a| gives a or -0, a^3 = inf included) and keeps NaN, and no
// 1 + tanh(u) cancels for negative a.
inline constexpr double kTwiceSqrt2OverPi = 2 * 0.7978845608028654;
inline constexpr double kGeluCubic = 0.044715;

// 2u and d(2u)/da
template <class C>
OPFORGE_GATE_HD C gelu_tanh_twice_inner(C a) { return C(kTwiceSqrt2OverPi) * (a + C(kGeluCubic) * a * a * a); }
template <class C>
OPFORGE_GATE_HD C gelu_tanh_twice_inner_slope(C a) {
  return C(kTwiceSqrt2OverPi) * (1 + C(3 * kGeluCubic) * a * a);
}

template <class S = Sigmoid>
struct GeGLUMath {
  template <class C>
  OPFORGE_GATE_HD C value(C a) const { return a * S{}(gelu_tanh_twice_inner(a)); }
  // gate'(a) = s + a * s * (1 - s) * d(2u)/da; the second term is 0 where the sigmoid saturates
  // (a * d(2u)/da may overflow there, and 0 * inf would be NaN).
  template <class C>
  OPFORGE_GATE_HD GateSlope<C> slope(C a) const {
    const C s = S{}(gelu_tanh_twice_inner(a));
    const C spread = s * (1 - s);
    const C through_u = spread == 0 ? C(0) : spread * a * gelu_tanh_twice_inner_slope(a);
    return {a * s, s + through_u};
  }
};

}  // namespace opforge::kernels
