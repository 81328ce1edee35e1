// The opforge custom ops as ONNX Runtime sees them (OrtCustomOp tables) and their compute entries.
#pragma once

#include <vector>

#include "ort_util.h"

namespace opforge_ort {

// Every OrtCustomOp of domain opforge v1, stamped with version OPFORGE_ORT_MIN_API.
const std::vector<const OrtCustomOp*>& custom_ops();

// An op's CPU kernel (cpu_kernels.cc); nullptr for an op without one.
CpuKernel cpu_forward(const opforge::kernels::OpDesc& op);

}  // namespace opforge_ort
