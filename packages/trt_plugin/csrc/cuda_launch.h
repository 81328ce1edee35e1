// The shared CUDA launchers (kernels/include/opforge/kernels/cuda_ops.cuh) for TensorRT's element
// types, compiled by nvcc in cuda_launch.cu; the plugin code stays free of CUDA kernel headers.
#pragma once

#include <cuda_runtime_api.h>

#include <opforge/kernels/attrs.h>

#include <cstdint>
#include <string>

namespace opforge_trt::cuda {

enum class Element { kFloat, kHalf, kBFloat16 };

// The outputs of `op` (its descriptor's order: Y[, H]) from its inputs (X[, R][, W]), X viewed as
// [rows, cols] (shapes.h RowView); w_float32: W is float32 with a kHalf / kBFloat16 X (a
// mixed-dtype call).
cudaError_t forward(const opforge::kernels::OpDesc& op, Element type, bool w_float32, const void* const* inputs,
                    void* const* outputs, int64_t rows, int64_t cols, const opforge::kernels::AttrValues& attrs,
                    cudaStream_t stream);

// "" when the current device can run this library's CUDA code (SASS or PTX, arch_guard.h); else
// why not. Decided once per device.
const std::string& arch_error() noexcept;

}  // namespace opforge_trt::cuda
