// The plugin's CUDA launcher (packages/trt_plugin/csrc/cuda_launch.cu) for the fuzz build:
// field collections never reach enqueue, so the plugin links against these refusals instead of
// an nvcc object, and the target builds with g++ and the sanitizers alone.
#include "cuda_launch.h"

namespace opforge_trt::cuda {

cudaError_t forward(const opforge::kernels::OpDesc&, Element, bool, const void* const*, void* const*, int64_t, int64_t,
                    const opforge::kernels::AttrValues&, cudaStream_t) {
  return cudaErrorNotSupported;
}

const std::string& arch_error() noexcept {
  static const std::string no_device = "fuzz build: no CUDA device";
  return no_device;
}

}  // namespace opforge_trt::cuda
