// The quantized-rows launch shape on CUDA (RMSNormQuant), the twin of quant_rows_cpu.h: one block
// of kQuantThreads per row (grid-stride over rows), the row's sum of squares and max|Y| reduced in
// float32 across the block (every thread gets the same totals), then Q and the row's scale with
// ops/rms_norm_quant.h's math. Y is recomputed in each pass from X and W.
// Included by cuda_ops.cuh before forward_by_desc: RMSNormQuantKernel is the op's binding.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "opforge/kernels/cuda_ops.cuh"  // Forward (cuda_ops.cuh includes this file)
#include "opforge/kernels/math.h"

namespace opforge::kernels::cuda {
namespace quant_detail {

constexpr int kQuantThreads = 256;

__device__ __forceinline__ float quant_load(float v) { return v; }
__device__ __forceinline__ float quant_load(__half v) { return __half2float(v); }
__device__ __forceinline__ float quant_load(__nv_bfloat16 v) { return __bfloat162float(v); }

// The block's sum (kMax false) or max (NaN never wins) of v; every thread gets the same value:
// each warp reduces by shuffles, then every thread combines the warps' results in warp order.
template <bool kMax>
__device__ __forceinline__ float block_reduce(float v, float* warps) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, v, offset);
    v = kMax ? (other > v ? other : v) : v + other;
  }
  __syncthreads();  // `warps` may still be read for the previous reduction
  if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = v;
  __syncthreads();
  float total = warps[0];
  for (int w = 1; w < kQuantThreads / 32; ++w) total = kMax ? (warps[w] > total ? warps[w] : total) : total + warps[w];
  return total;
}

template <class T, class TW>
__device__ __forceinline__ float quant_value(const T* xr, const TW* w, float inv, int64_t j) {
  return quant_load(xr[j]) * inv * quant_load(w[j]);
}

template <class T, class TW>
__global__ void __launch_bounds__(kQuantThreads)
    rms_norm_quant_kernel(const T* x, const TW* w, void* q, float* scale, int64_t rows, int64_t cols, float eps,
                          bool fp8, float scale_ub) {
  __shared__ float warps[kQuantThreads / 32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * cols;
    float sum = 0.0f;
    for (int64_t j = threadIdx.x; j < cols; j += kQuantThreads) {
      const float v = quant_load(xr[j]);
      sum += v * v;
    }
    sum = block_reduce<false>(sum, warps);
    const float inv = rms_inverse(cols == 0 ? 0.0f : sum / static_cast<float>(cols), eps);
    float amax = 0.0f;
    for (int64_t j = threadIdx.x; j < cols; j += kQuantThreads) {
      const float a = fabsf(quant_value(xr, w, inv, j));
      amax = a > amax ? a : amax;
    }
    const float s = quant_scale(block_reduce<true>(amax, warps), scale_ub, fp8);
    if (threadIdx.x == 0) scale[row] = s;
    if (fp8) {
      uint8_t* qr = static_cast<uint8_t*>(q) + row * cols;
      for (int64_t j = threadIdx.x; j < cols; j += kQuantThreads) qr[j] = quant_fp8_bits(quant_value(xr, w, inv, j), s);
    } else {
      int8_t* qr = static_cast<int8_t*>(q) + row * cols;
      const float inv_scale = 1.0f / s;
      for (int64_t j = threadIdx.x; j < cols; j += kQuantThreads) qr[j] = quant_int8(quant_value(xr, w, inv, j), inv_scale);
    }
  }
}

}  // namespace quant_detail

// RMSNormQuant of a contiguous [rows, cols] X on `stream`: Q (int8, or float8 e4m3fn bits when
// fp8) and the rows' float32 scales. Rows with cols == 0 get their scale too. W is T, or float
// with a 16-bit X.
template <class T, class TW>
cudaError_t rms_norm_quant_forward(const T* x, const TW* w, void* q, float* scale, int64_t rows, int64_t cols,
                                   float eps, bool fp8, float scale_ub, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  const int64_t max_blocks = int64_t(1) << 20;  // grid-stride beyond
  const unsigned blocks = static_cast<unsigned>(rows < max_blocks ? rows : max_blocks);
  quant_detail::rms_norm_quant_kernel<T, TW><<<blocks, quant_detail::kQuantThreads, 0, stream>>>(
      x, w, q, scale, rows, cols, eps, fp8, scale_ub);
  return cudaGetLastError();
}

// The op's binding (cuda_ops.cuh's calling convention): attributes epsilon, quant_dtype, scale_ub;
// outputs Q and Scale from Forward::outputs (a layer that has not set it passes them as y and h).
struct RMSNormQuantKernel {
  static constexpr const OpDesc& desc = kRMSNormQuantOp;
  template <class T>
  static cudaError_t forward(const Forward<T>& a, cudaStream_t stream) {
    void* q = a.outputs != nullptr ? a.outputs[0] : static_cast<void*>(a.y);
    float* scale = static_cast<float*>(a.outputs != nullptr ? a.outputs[1] : static_cast<void*>(a.h));
    const bool fp8 = static_cast<int32_t>(a.attrs[1]) == kQuantFloat8E4M3FN;
    if (a.w_float32 != nullptr)
      return rms_norm_quant_forward<T>(a.x, a.w_float32, q, scale, a.rows, a.cols, a.attrs[0], fp8, a.attrs[2], stream);
    return rms_norm_quant_forward<T>(a.x, a.w, q, scale, a.rows, a.cols, a.attrs[0], fp8, a.attrs[2], stream);
  }
};

}  // namespace opforge::kernels::cuda
