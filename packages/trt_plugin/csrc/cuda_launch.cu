#include <opforge/kernels/cuda_arch_guard.h>
#include <opforge/kernels/cuda_ops.cuh>

#include "cuda_launch.h"

namespace opforge_trt::cuda {
namespace kc = opforge::kernels::cuda;

namespace {
template <class Op, class T>
cudaError_t forward_as(const void* x, const void* w, void* y, int64_t rows, int64_t cols, float attr,
                       cudaStream_t s) {
  const kc::Forward<T> args{static_cast<const T*>(x), static_cast<const T*>(w), static_cast<T*>(y), rows, cols, attr};
  return Op::forward(args, s);
}

template <class Op>
cudaError_t forward_typed(Element type, const void* x, const void* w, void* y, int64_t rows, int64_t cols, float attr,
                          cudaStream_t s) {
  switch (type) {
    case Element::kFloat: return forward_as<Op, float>(x, w, y, rows, cols, attr, s);
    case Element::kHalf: return forward_as<Op, __half>(x, w, y, rows, cols, attr, s);
    case Element::kBFloat16: return forward_as<Op, __nv_bfloat16>(x, w, y, rows, cols, attr, s);
  }
  return cudaErrorInvalidValue;
}

using Launcher = cudaError_t (*)(Element, const void*, const void*, void*, int64_t, int64_t, float, cudaStream_t);
struct Entry {
  const opforge::kernels::OpDesc* op;
  Launcher launch;
};

// Every op's CUDA kernel: one row per op.
const Entry kLaunchers[] = {
    {&kc::SwishKernel::desc, forward_typed<kc::SwishKernel>},
    {&kc::RMSNormKernel::desc, forward_typed<kc::RMSNormKernel>},
    {&kc::SwiGLUKernel::desc, forward_typed<kc::SwiGLUKernel>},
};
}  // namespace

cudaError_t forward(const opforge::kernels::OpDesc& op, Element type, const void* x, const void* w, void* y,
                    int64_t rows, int64_t cols, float attr, cudaStream_t s) {
  for (const Entry& entry : kLaunchers)
    if (entry.op == &op) return entry.launch(type, x, w, y, rows, cols, attr, s);
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
