// The plugin's CUDA launchers (packages/trt_plugin/csrc/cuda_launch.cu) for the fuzz build:
// field collections never reach enqueue, so the plugin links against these refusals instead of
// an nvcc object, and the target builds with g++ and the sanitizers alone.
#include "cuda_launch.h"

namespace opforge_trt::cuda {

cudaError_t swish(Element, const void*, void*, int64_t, float, cudaStream_t) { return cudaErrorNotSupported; }

cudaError_t rms_norm(Element, const void*, const void*, void*, int64_t, int64_t, float, cudaStream_t) {
  return cudaErrorNotSupported;
}

cudaError_t swiglu(Element, const void*, void*, int64_t, int64_t, float, cudaStream_t) { return cudaErrorNotSupported; }

}  // namespace opforge_trt::cuda
