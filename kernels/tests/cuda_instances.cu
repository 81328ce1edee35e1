// Every CUDA launcher of cuda.cuh for every storage type, so that compiling this file builds
// every kernel instance the layers can launch (each packet width, cached and streamed rows).
// Compiled by the codegen tests (test_cuda_codegen.py, test_kernels.py); never run.
#include "opforge/kernels/cuda_arch_guard.h"
#include "opforge/kernels/cuda_ops.cuh"

namespace c = opforge::kernels::cuda;

template <class T>
cudaError_t every_launcher(T* a, T* b, T* out, float* dw, void* workspace, cudaStream_t s) {
  c::swish_forward(a, out, 9, 1.0f, s);
  c::swish_backward(a, b, out, 9, 1.0f, s);
  c::gated_forward(a, out, 3, 3, opforge::kernels::SwiGLUGate<>{1.0f}, s);
  c::gated_backward(a, b, out, 3, 3, opforge::kernels::SwiGLUGate<>{1.0f}, s);
  c::gated_forward(a, out, 3, 3, opforge::kernels::GeGLUGate<>{}, s);
  c::gated_backward(a, b, out, 3, 3, opforge::kernels::GeGLUGate<>{}, s);
  c::rms_norm_forward(a, b, out, 3, 3, 1e-6f, s);
  c::rms_norm_backward(a, b, b, out, dw, workspace, 3, 3, 1e-6f, s);
  c::add_rms_norm_forward(a, b, b, out, out + 9, 3, 3, 1e-6f, s);
  return c::add_rms_norm_backward(a, a, b, b, b, out, out + 9, dw, workspace, 3, 3, 1e-6f, s);
}

template cudaError_t every_launcher<float>(float*, float*, float*, float*, void*, cudaStream_t);
template cudaError_t every_launcher<__half>(__half*, __half*, __half*, float*, void*, cudaStream_t);
template cudaError_t every_launcher<__nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*,
                                                   float*, void*, cudaStream_t);
