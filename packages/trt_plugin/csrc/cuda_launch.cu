#include <opforge/kernels/cuda_arch_guard.h>
#include <opforge/kernels/cuda_ops.cuh>

#include "cuda_launch.h"

namespace opforge_trt::cuda {
namespace kc = opforge::kernels::cuda;

cudaError_t forward(const opforge::kernels::OpDesc& op, Element type, bool w_float32, const void* const* inputs,
                    void* const* outputs, int64_t rows, int64_t cols, const opforge::kernels::AttrValues& attrs,
                    cudaStream_t s) {
  switch (type) {
    case Element::kFloat:
      if (w_float32) break;  // float32 X: W is float32 already, never a mixed call
      return kc::forward_by_desc<float>(op, inputs, outputs, rows, cols, attrs, false, s);
    case Element::kHalf: return kc::forward_by_desc<__half>(op, inputs, outputs, rows, cols, attrs, w_float32, s);
    case Element::kBFloat16:
      return kc::forward_by_desc<__nv_bfloat16>(op, inputs, outputs, rows, cols, attrs, w_float32, s);
  }
  return cudaErrorInvalidValue;
}

const std::string& arch_error() noexcept {
  static const std::string kFailed = "opforge_trt (libopforge_trt.so.1): the GPU arch check failed (out of memory)";
  try {
    return opforge::kernels::cuda::current_device_arch_error("opforge_trt (libopforge_trt.so.1)");
  } catch (...) {
    return kFailed;
  }
}

}  // namespace opforge_trt::cuda
