// CUDA execution provider: the shared CUDA kernels (kernels/include/opforge/kernels/cuda_ops.cuh)
// launched on the stream ONNX Runtime hands the kernel.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <opforge/kernels/cuda_arch_guard.h>
#include <opforge/kernels/cuda_ops.cuh>

#include "cuda_kernels.h"

namespace opforge_ort::cuda {
namespace {
namespace kc = opforge::kernels::cuda;

// ONNX element types (onnxruntime_c_api.h); this file does not include ORT headers.
constexpr int kFloat = 1;
constexpr int kFloat16 = 10;

template <class Op, class T>
int forward_as(const void* x, const void* w, void* y, int64_t rows, int64_t cols, float attr, cudaStream_t s) {
  const kc::Forward<T> args{static_cast<const T*>(x), static_cast<const T*>(w), static_cast<T*>(y), rows, cols, attr};
  return Op::forward(args, s);
}

template <class Op>
int forward_typed(int type, const void* x, const void* w, void* y, int64_t rows, int64_t cols, float attr,
                  cudaStream_t s) {
  if (type == kFloat) return forward_as<Op, float>(x, w, y, rows, cols, attr, s);
  if (type == kFloat16) return forward_as<Op, __half>(x, w, y, rows, cols, attr, s);
  return cudaErrorInvalidValue;
}

using Launcher = int (*)(int, const void*, const void*, void*, int64_t, int64_t, float, cudaStream_t);
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

int forward(const opforge::kernels::OpDesc& op, int type, const void* x, const void* w, void* y, int64_t rows,
            int64_t cols, float attr, void* stream) {
  for (const Entry& entry : kLaunchers)
    if (entry.op == &op) return entry.launch(type, x, w, y, rows, cols, attr, static_cast<cudaStream_t>(stream));
  return cudaErrorInvalidValue;
}

const char* arch_error() {
  const std::string& error = opforge::kernels::cuda::current_device_arch_error("opforge_ort (libopforge_ort.so.1)");
  return error.empty() ? nullptr : error.c_str();
}

const char* error_string(int error) { return cudaGetErrorString(static_cast<cudaError_t>(error)); }

}  // namespace opforge_ort::cuda
