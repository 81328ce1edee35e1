// Swish's math (host and device): its value and derivative. Launch shape: elementwise (cpu.h's
// swish loops on the CPU's vectorizable sigmoid, cuda.cuh's elementwise kernel with SwishOp).
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

}  // namespace opforge::kernels
