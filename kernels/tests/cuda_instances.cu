// Every CUDA launcher of cuda.cuh for every op of the spec and every storage type, so that compiling
// this file builds every kernel instance the layers can launch (each packet width, cached and
// streamed rows). Compiled by the codegen tests (test_cuda_codegen.py, test_kernels.py); never run.
#include "opforge/kernels/cuda_arch_guard.h"
#include "opforge/kernels/cuda_ops.cuh"

#include "family_launch.h"

template <class T, class TW = T>
cudaError_t every_launcher(T* a, T* b, T* out, float* dw, void* workspace, cudaStream_t s) {
  void* in[5] = {a, b, b, b, a};
  void* outs[3] = {out, dw, out + 9};
  cudaError_t last = cudaSuccess;
  for (int op = 0; op < opforge_test::kOpCount; ++op) {
    for (bool backward : {false, true}) last = opforge_test::launch_op<T, TW>(op, backward, 3, 3, 1.0f, in, outs, workspace, s);
  }
  return last;
}

template cudaError_t every_launcher<float>(float*, float*, float*, float*, void*, cudaStream_t);
template cudaError_t every_launcher<__half>(__half*, __half*, __half*, float*, void*, cudaStream_t);
template cudaError_t every_launcher<__nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*,
                                                   float*, void*, cudaStream_t);
// A float32 W beside a 16-bit X (a mixed-dtype call): the row kernels' second instances.
template cudaError_t every_launcher<__half, float>(__half*, __half*, __half*, float*, void*, cudaStream_t);
template cudaError_t every_launcher<__nv_bfloat16, float>(__nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*,
                                                          float*, void*, cudaStream_t);
