// Launchers for the CUDA execution provider, compiled from cuda_kernels.cu (nvcc). The C++ side
// stays free of CUDA headers: streams are void*, errors are cudaError_t values as int.
#pragma once

#include <opforge/kernels/attrs.h>

#include <cstdint>

namespace opforge_ort::cuda {

// type: ONNX element type, FLOAT or FLOAT16; w_float32: W is float32 with a FLOAT16 X (a mixed-dtype
// call). inputs / outputs: the op's tensors in its descriptor's order (cuda_ops.cuh
// forward_by_desc); X is [rows, cols] (shapes.h RowView).
int forward(const opforge::kernels::OpDesc& op, int type, bool w_float32, const void* const* inputs,
            void* const* outputs, int64_t rows, int64_t cols, const opforge::kernels::AttrValues& attrs, void* stream);
const char* error_string(int error);
// nullptr when the current device can run this library's CUDA code (SASS or PTX, arch_guard.h);
// else why not. Decided once per device.
const char* arch_error();

}  // namespace opforge_ort::cuda
