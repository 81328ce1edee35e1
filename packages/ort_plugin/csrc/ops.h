// The opforge custom ops as ONNX Runtime sees them (OrtCustomOp tables) and their compute entries.
#pragma once

#include <vector>

#include "ort_util.h"

namespace opforge_ort {

// Every OrtCustomOp of domain opforge v1, stamped with version OPFORGE_ORT_MIN_API.
const std::vector<const OrtCustomOp*>& custom_ops();

// CPU execution provider. Inputs are validated; y has x's shape and type; x.size > 0.
OrtStatus* swish_cpu(const Kernel& k, OrtKernelContext* ctx, const Tensor& x, void* y);
OrtStatus* rms_norm_cpu(const Kernel& k, OrtKernelContext* ctx, const Tensor& x, const Tensor& w, void* y,
                        int64_t rows, int64_t cols);
// X [rows, 2d] -> y [rows, d]
OrtStatus* swiglu_cpu(const Kernel& k, OrtKernelContext* ctx, const Tensor& x, void* y, int64_t rows, int64_t d);

}  // namespace opforge_ort
