// The quantized rows' launcher families on CUDA, the twin of quant_rows_cpu.h: row_norm_quant (X,
// W -> Q, Scale: RMSNormQuant) and residual_row_norm_quant (X, R, W -> Q, Scale, H:
// AddRMSNormQuant). One block of kQuantThreads per row (grid-stride over rows), the row's sum of
// squares and max|Y| reduced in float32 across the block (every thread gets the same totals), then
// Q and the row's scale with ops/rms_norm_quant.h's math and the op's functor (inverse, quant_dtype,
// scale_ub; sum for the residual family). Y is recomputed in each pass from X (or H) and W.
// Their bindings (RowNormQuantKernel, ResidualRowNormQuantKernel) are cuda_ops.cuh's.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "opforge/kernels/cuda.cuh"
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

// kResidual: the row is H = norm.sum(X, R) rounded to T, written to h in the first pass (each
// element of X and R read by the thread that writes H's, so h may be r) and read back after the
// block's barrier; r and h are unused otherwise.
template <class T, class TW, bool kResidual, class Norm>
__global__ void __launch_bounds__(kQuantThreads)
    quant_rows_kernel(const T* x, const T* r, const TW* w, void* q, float* scale, T* h, int64_t rows, int64_t cols,
                      Norm norm) {
  __shared__ float warps[kQuantThreads / 32];
  const bool fp8 = quant_fp8(norm);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * cols;
    float sum = 0.0f;
    for (int64_t j = threadIdx.x; j < cols; j += kQuantThreads) {
      float v;
      if constexpr (kResidual) {
        const T hv = detail::from_float<T>(norm.sum(quant_load(xr[j]), quant_load(r[row * cols + j])));
        h[row * cols + j] = hv;
        v = quant_load(hv);
      } else {
        v = quant_load(xr[j]);
      }
      sum += v * v;
    }
    sum = block_reduce<false>(sum, warps);  // its barrier also makes H's row visible to the block
    if constexpr (kResidual) xr = h + row * cols;
    const float inv = norm.inverse(cols == 0 ? 0.0f : sum / static_cast<float>(cols));
    float amax = 0.0f;
    for (int64_t j = threadIdx.x; j < cols; j += kQuantThreads) {
      const float a = fabsf(quant_value(xr, w, inv, j));
      amax = a > amax ? a : amax;
    }
    const float s = quant_scale(block_reduce<true>(amax, warps), norm.scale_ub, fp8);
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

template <bool kResidual, class T, class TW, class Norm>
cudaError_t launch_quant_rows(const T* x, const T* r, const TW* w, void* q, float* scale, T* h, int64_t rows,
                              int64_t cols, const Norm& norm, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  const int64_t max_blocks = int64_t(1) << 20;  // grid-stride beyond
  const unsigned blocks = static_cast<unsigned>(rows < max_blocks ? rows : max_blocks);
  quant_rows_kernel<T, TW, kResidual, Norm><<<blocks, kQuantThreads, 0, s>>>(x, r, w, q, scale, h, rows, cols,
                                                                                 norm);
  return cudaGetLastError();
}

}  // namespace quant_detail

// The row_norm_quant family on a contiguous [rows, cols] X on `s`: Q (int8, or float8 e4m3fn
// bits by norm.quant_dtype) and the rows' float32 scales. Rows with cols == 0 get their scale too.
// W is T, or float with a 16-bit X.
template <class T, class TW, class Norm>
cudaError_t row_norm_quant_forward(const T* x, const TW* w, void* q, float* scale, int64_t rows, int64_t cols,
                                   const Norm& norm, cudaStream_t s) {
  return quant_detail::launch_quant_rows<false>(x, static_cast<const T*>(nullptr), w, q, scale,
                                                static_cast<T*>(nullptr), rows, cols, norm, s);
}

// The residual_row_norm_quant family: the same of H = norm.sum(X, R) rounded to T, written to h.
template <class T, class TW, class Norm>
cudaError_t residual_row_norm_quant_forward(const T* x, const T* r, const TW* w, void* q, float* scale, T* h,
                                            int64_t rows, int64_t cols, const Norm& norm, cudaStream_t s) {
  return quant_detail::launch_quant_rows<true>(x, r, w, q, scale, h, rows, cols, norm, s);
}

}  // namespace opforge::kernels::cuda
