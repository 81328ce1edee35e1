// Launchers for the CUDA execution provider, compiled from cuda_kernels.cu (nvcc). The C++ side
// stays free of CUDA headers: streams are void*, errors are cudaError_t values as int.
#pragma once

#include <cstdint>

namespace opforge_ort::cuda {

// type: ONNX element type, FLOAT or FLOAT16.
int swish(int type, const void* x, void* y, int64_t n, float beta, void* stream);
int rms_norm(int type, const void* x, const void* w, void* y, int64_t rows, int64_t cols, float eps, void* stream);
// X [rows, 2d] -> Y [rows, d]
int swiglu(int type, const void* x, void* y, int64_t rows, int64_t d, float beta, void* stream);
const char* error_string(int error);

}  // namespace opforge_ort::cuda
