// CUDA kernels and launchers for the opforge ops, shared by the torch extension, the ONNX Runtime
// CUDA-EP kernels and the TensorRT plugins. Include from exactly the .cu files that need them.
// Math is done in float (accumulation too); storage types: float, __half, __nv_bfloat16.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "opforge/kernels/math.h"

namespace opforge::kernels::cuda {
namespace detail {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// 16-byte packets for vectorized loads and stores.
template <class T>
struct alignas(16) Packet {
  static constexpr int kSize = 16 / sizeof(T);
  T v[kSize];
};

constexpr int kThreads = 256;

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

inline unsigned grid_for(int64_t work, int per_block) {
  const int64_t blocks = (work + per_block - 1) / per_block;
  // Grid-stride loops cover the rest; this cap keeps the grid valid on every architecture.
  return static_cast<unsigned>(blocks < 65535 ? blocks : 65535);
}

// Elementwise map over n items. Packets when every pointer is 16-byte aligned, scalars for the
// tail and for unaligned views.
template <class T, class Op, int kArgs>
__global__ void elementwise_kernel(Op op, const T* __restrict__ a, const T* __restrict__ b,
                                   T* __restrict__ out, int64_t n, bool packed) {
  using P = Packet<T>;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t tail_start = 0;
  if (packed) {
    const int64_t packets = n / P::kSize;
    for (int64_t p = first; p < packets; p += stride) {
      P va = reinterpret_cast<const P*>(a)[p];
      P vb;
      if constexpr (kArgs == 2) vb = reinterpret_cast<const P*>(b)[p];
      P vo;
#pragma unroll
      for (int k = 0; k < P::kSize; ++k) {
        const float fb = kArgs == 2 ? to_float(vb.v[k]) : 0.0f;
        vo.v[k] = from_float<T>(op(to_float(va.v[k]), fb));
      }
      reinterpret_cast<P*>(out)[p] = vo;
    }
    tail_start = packets * P::kSize;
  }
  for (int64_t i = tail_start + first; i < n; i += stride) {
    const float fb = kArgs == 2 ? to_float(b[i]) : 0.0f;
    out[i] = from_float<T>(op(to_float(a[i]), fb));
  }
}

struct SwishOp {
  float beta;
  __device__ float operator()(float x, float) const { return swish(x, beta); }
};

// a = x, b = dy
struct SwishGradOp {
  float beta;
  __device__ float operator()(float x, float dy) const { return swish_grad(dy, x, beta); }
};

template <class T, class Op, int kArgs>
cudaError_t launch_elementwise(Op op, const T* a, const T* b, T* out, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  const bool packed = aligned16(a) && aligned16(out) && (kArgs == 1 || aligned16(b));
  const int64_t work = packed ? (n + Packet<T>::kSize - 1) / Packet<T>::kSize : n;
  elementwise_kernel<T, Op, kArgs><<<grid_for(work, kThreads), kThreads, 0, s>>>(op, a, b, out, n,
                                                                                  packed);
  return cudaGetLastError();
}

// SwiGLU over Y's n = rows * d elements; X is [rows, 2d] (A = first half of a row, B = second).
template <class T>
__global__ void swiglu_forward_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n,
                                      int64_t d, float beta) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t a = i + (i / d) * d;  // row * 2d + column
    y[i] = from_float<T>(swiglu(to_float(x[a]), to_float(x[a + d]), beta));
  }
}

// dA = dY * B * swish'(A), dB = dY * swish(A)
template <class T>
__global__ void swiglu_backward_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                       T* __restrict__ dx, int64_t n, int64_t d, float beta) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t a = i + (i / d) * d;
    const float av = to_float(x[a]), g = to_float(dy[i]);
    dx[a] = from_float<T>(swish_grad(g * to_float(x[a + d]), av, beta));
    dx[a + d] = from_float<T>(g * swish(av, beta));
  }
}

// Block-wide sum; every thread gets the result. `scratch` holds one float per warp.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  __syncthreads();  // scratch may still be read from a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < warps; ++w) total += scratch[w];
  return total;
}

// One block per row (grid-stride over rows).
template <class T>
__global__ void rms_norm_forward_kernel(const T* __restrict__ x, const T* __restrict__ w,
                                        T* __restrict__ y, int64_t rows, int64_t cols, float eps) {
  __shared__ float scratch[32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * cols;
    float sq = 0.0f;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const float v = to_float(xr[j]);
      sq += v * v;
    }
    const float inv = rms_inverse(block_sum(sq, scratch) / float(cols), eps);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      y[row * cols + j] = from_float<T>(to_float(xr[j]) * inv * to_float(w[j]));
    }
  }
}

template <class T>
__global__ void rms_norm_backward_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                         const T* __restrict__ w, T* __restrict__ dx,
                                         float* __restrict__ dw, int64_t rows, int64_t cols,
                                         float eps) {
  __shared__ float scratch[32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t base = row * cols;
    float sq = 0.0f, dot = 0.0f;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const float xv = to_float(x[base + j]);
      sq += xv * xv;
      dot += to_float(dy[base + j]) * to_float(w[j]) * xv;
    }
    const float inv = rms_inverse(block_sum(sq, scratch) / float(cols), eps);
    const float coef = inv * inv * inv * block_sum(dot, scratch) / float(cols);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const float xv = to_float(x[base + j]);
      const float dyv = to_float(dy[base + j]);
      dx[base + j] = from_float<T>(inv * dyv * to_float(w[j]) - xv * coef);
      atomicAdd(dw + j, dyv * xv * inv);
    }
  }
}

inline int row_threads(int64_t cols) {
  int threads = 32;
  while (threads < kThreads && threads < cols) threads *= 2;
  return threads;
}

}  // namespace detail

template <class T>
cudaError_t swish_forward(const T* x, T* y, int64_t n, float beta, cudaStream_t s) {
  return detail::launch_elementwise<T, detail::SwishOp, 1>(detail::SwishOp{beta}, x, nullptr, y,
                                                           n, s);
}

template <class T>
cudaError_t swish_backward(const T* dy, const T* x, T* dx, int64_t n, float beta,
                           cudaStream_t s) {
  return detail::launch_elementwise<T, detail::SwishGradOp, 2>(detail::SwishGradOp{beta}, x, dy,
                                                               dx, n, s);
}

// X [rows, 2d] -> Y [rows, d]
template <class T>
cudaError_t swiglu_forward(const T* x, T* y, int64_t rows, int64_t d, float beta, cudaStream_t s) {
  if (rows == 0 || d == 0) return cudaSuccess;
  detail::swiglu_forward_kernel<T><<<detail::grid_for(rows * d, detail::kThreads), detail::kThreads,
                                     0, s>>>(x, y, rows * d, d, beta);
  return cudaGetLastError();
}

template <class T>
cudaError_t swiglu_backward(const T* dy, const T* x, T* dx, int64_t rows, int64_t d, float beta,
                            cudaStream_t s) {
  if (rows == 0 || d == 0) return cudaSuccess;
  detail::swiglu_backward_kernel<T><<<detail::grid_for(rows * d, detail::kThreads),
                                      detail::kThreads, 0, s>>>(dy, x, dx, rows * d, d, beta);
  return cudaGetLastError();
}

template <class T>
cudaError_t rms_norm_forward(const T* x, const T* w, T* y, int64_t rows, int64_t cols, float eps,
                             cudaStream_t s) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  detail::rms_norm_forward_kernel<T><<<detail::grid_for(rows, 1), detail::row_threads(cols), 0, s>>>(
      x, w, y, rows, cols, eps);
  return cudaGetLastError();
}

template <class T>
cudaError_t rms_norm_backward(const T* dy, const T* x, const T* w, T* dx, float* dw, int64_t rows,
                              int64_t cols, float eps, cudaStream_t s) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  detail::rms_norm_backward_kernel<T>
      <<<detail::grid_for(rows, 1), detail::row_threads(cols), 0, s>>>(dy, x, w, dx, dw, rows,
                                                                        cols, eps);
  return cudaGetLastError();
}

}  // namespace opforge::kernels::cuda
