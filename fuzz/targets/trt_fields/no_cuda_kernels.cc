// The plugin's CUDA launcher (packages/trt_plugin/csrc/cuda_launch.cu) for the fuzz build:
// field collections never reach enqueue, so the plugin links against this refusal instead of
// an nvcc object, and the target builds with g++ and the sanitizers alone.
#include "cuda_launch.h"

namespace opforge_trt::cuda {

cudaError_t forward(const opforge::kernels::OpDesc&, Element, const void*, const void*, void*, int64_t, int64_t, float,
                    cudaStream_t) {
  return cudaErrorNotSupported;
}

}  // namespace opforge_trt::cuda
