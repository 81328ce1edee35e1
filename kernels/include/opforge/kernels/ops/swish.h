// Swish's math (host and device): its value and derivative. Family elementwise: SwishMath runs in
// cpu.h's elementwise loops (on the CPU's vectorizable sigmoid) and cuda.cuh's elementwise kernel.
#pragma once

#include "opforge/kernels/math.h"  // the shared math (sigmoid, GateSlope); it includes this file

namespace opforge::kernels {

// Y = X * sigmoid(beta * X)
OPFORGE_HD float swish(float x, float beta) { return x * sigmoid(beta * x); }
OPFORGE_HD double swish(double x, double beta) { return x * sigmoid(beta * x); }

// dY/dX = s + beta * x * s * (1 - s), with s = sigmoid(beta * x)
OPFORGE_HD float swish_grad(float dy, float x, float beta) {
  const float s = sigmoid(beta * x);
  return dy * (s + beta * x * s * (1.0f - s));
}

OPFORGE_HD double swish_grad(double dy, double x, double beta) {
  const double s = sigmoid(beta * x);
  return dy * (s + beta * x * s * (1.0 - s));
}

// The elementwise family's functor: value(x) = Y, slope(x) = dY/dX, on the sigmoid `S` (math.h's,
// or the CPU loops' vectorizable one), with the op's attributes as members in its descriptor's order.
template <class S = Sigmoid>
struct SwishMath {
  float beta;
  template <class C>
  OPFORGE_GATE_HD C value(C x) const { return x * S{}(beta * x); }
  template <class C>
  OPFORGE_GATE_HD C slope(C x) const {
    const C s = S{}(beta * x);
    return s + beta * x * s * (1 - s);
  }
};

}  // namespace opforge::kernels
