// The shared CUDA launchers (kernels/include/opforge/kernels/cuda.cuh) for TensorRT's element
// types, compiled by nvcc in cuda_launch.cu; the plugin code stays free of CUDA kernel headers.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace opforge_trt::cuda {

enum class Element { kFloat, kHalf, kBFloat16 };

cudaError_t swish(Element type, const void* x, void* y, int64_t n, float beta, cudaStream_t stream);
cudaError_t rms_norm(Element type, const void* x, const void* w, void* y, int64_t rows, int64_t cols,
                     float epsilon, cudaStream_t stream);
// X [rows, 2d] -> Y [rows, d]
cudaError_t swiglu(Element type, const void* x, void* y, int64_t rows, int64_t d, float beta, cudaStream_t stream);

}  // namespace opforge_trt::cuda
