// CUDA kernels and launchers for the opforge ops, shared by the torch extension, the ONNX Runtime
// CUDA-EP kernels and the TensorRT plugins. Include from exactly the .cu files that need them.
// Math is done in float (accumulation too); storage types: float, __half, __nv_bfloat16.
// Every launcher runs on the caller's stream and only enqueues work (no synchronization).
// Which thread visits which element is cuda_index.h's, replayed on the CPU by the tests.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "opforge/kernels/cuda_index.h"
#include "opforge/kernels/math.h"

namespace opforge::kernels::cuda {
namespace detail {

namespace ci = opforge::kernels::cuda_index;

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

// kVec elements moved by one load or store: 16 bytes (LDG.128 / STG.128) when the data allow.
template <class T, int kVec>
struct alignas(sizeof(T) * kVec) Packet {
  T v[kVec];
};

template <class T>
constexpr int kWidestPacket = ci::kPacketBytes / int(sizeof(T));

template <int kVec, class T>
__device__ __forceinline__ Packet<T, kVec> load(const T* at) {
  return *reinterpret_cast<const Packet<T, kVec>*>(at);
}

template <int kVec, class T>
__device__ __forceinline__ void store(T* at, const Packet<T, kVec>& value) {
  *reinterpret_cast<Packet<T, kVec>*>(at) = value;
}

__device__ __forceinline__ ci::Launch this_launch() {
  return {{gridDim.x, gridDim.y}, {blockDim.x, blockDim.y}};
}
__device__ __forceinline__ ci::Dim2 block_index() { return {blockIdx.x, blockIdx.y}; }
__device__ __forceinline__ ci::Dim2 thread_index() { return {threadIdx.x, threadIdx.y}; }

inline dim3 grid_of(const ci::Launch& l) { return dim3(l.grid.x, l.grid.y); }
inline dim3 block_of(const ci::Launch& l) { return dim3(l.block.x, l.block.y); }

template <class... Ts>
uint64_t address_bits(const Ts*... pointers) {
  return (uint64_t(reinterpret_cast<uintptr_t>(pointers)) | ...);
}

// launch(std::integral_constant<int, vec>{}): the packet width as a compile-time constant.
template <class T, int kVec = kWidestPacket<T>, class Launch>
cudaError_t with_packet(int vec, Launch&& launch) {
  if constexpr (kVec == 1) {
    return launch(std::integral_constant<int, 1>{});
  } else {
    if (vec == kVec) return launch(std::integral_constant<int, kVec>{});
    return with_packet<T, kVec / 2>(vec, launch);
  }
}

// ---- elementwise (any elementwise op's functor of math.h: value and slope) ---------------------

template <class Fn>
struct ValueOp {
  Fn fn;
  __device__ float operator()(float x, float) const { return fn.value(x); }
};

// a = x, b = dy
template <class Fn>
struct SlopeOp {
  Fn fn;
  __device__ float operator()(float x, float dy) const { return dy * fn.slope(x); }
};

template <class T, int kVec, class Op, int kArgs>
__global__ void elementwise_kernel(Op op, const T* __restrict__ a, const T* __restrict__ b,
                                   T* __restrict__ out, int64_t n) {
  ci::elementwise_visit(
      this_launch(), block_index(), thread_index(), n, kVec,
      [&](int64_t p) {
        const Packet<T, kVec> va = load<kVec>(a + p * kVec);
        Packet<T, kVec> vb = va;
        if constexpr (kArgs == 2) vb = load<kVec>(b + p * kVec);
        Packet<T, kVec> vo;
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
          vo.v[k] = from_float<T>(op(to_float(va.v[k]), to_float(vb.v[k])));
        }
        store<kVec>(out + p * kVec, vo);
      },
      [&](int64_t i) {
        const float fb = kArgs == 2 ? to_float(b[i]) : 0.0f;
        out[i] = from_float<T>(op(to_float(a[i]), fb));
      });
}

template <class T, class Op, int kArgs>
cudaError_t launch_elementwise(Op op, const T* a, const T* b, T* out, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  const int vec = ci::aligned_packet_elems(sizeof(T), address_bits(a, b, out));
  return with_packet<T>(vec, [&](auto packet) {
    constexpr int kVec = decltype(packet)::value;
    const ci::Launch l = ci::elementwise_launch(n, kVec);
    elementwise_kernel<T, kVec, Op, kArgs><<<grid_of(l), block_of(l), 0, s>>>(op, a, b, out, n);
    return cudaGetLastError();
  });
}

// ---- gated (any gate of math.h): rows and packets indexed apart, no division per element -------

// Y = gate(A) * B
template <class T, int kVec, class Gate>
__global__ void gated_forward_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows,
                                     int64_t d, Gate gate) {
  ci::gated_visit(this_launch(), block_index(), thread_index(), rows, d / kVec,
                  [&](int64_t row, int64_t p) {
                    const ci::GatedOffsets at = ci::gated_offsets(row, p * kVec, d);
                    const Packet<T, kVec> a = load<kVec>(x + at.a), b = load<kVec>(x + at.b);
                    Packet<T, kVec> out;
#pragma unroll
                    for (int k = 0; k < kVec; ++k) {
                      out.v[k] = from_float<T>(gate.value(to_float(a.v[k])) * to_float(b.v[k]));
                    }
                    store<kVec>(y + at.y, out);
                  });
}

// dA = dY * B * gate'(A), dB = dY * gate(A)
template <class T, int kVec, class Gate>
__global__ void gated_backward_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                      T* __restrict__ dx, int64_t rows, int64_t d, Gate gate) {
  ci::gated_visit(this_launch(), block_index(), thread_index(), rows, d / kVec,
                  [&](int64_t row, int64_t p) {
                    const ci::GatedOffsets at = ci::gated_offsets(row, p * kVec, d);
                    const Packet<T, kVec> a = load<kVec>(x + at.a), b = load<kVec>(x + at.b);
                    const Packet<T, kVec> g = load<kVec>(dy + at.y);
                    Packet<T, kVec> da, db;
#pragma unroll
                    for (int k = 0; k < kVec; ++k) {
                      const float gv = to_float(g.v[k]);
                      const GateSlope<float> at_a = gate.slope(to_float(a.v[k]));
                      da.v[k] = from_float<T>(gv * to_float(b.v[k]) * at_a.slope);
                      db.v[k] = from_float<T>(gv * at_a.value);
                    }
                    store<kVec>(dx + at.a, da);
                    store<kVec>(dx + at.b, db);
                  });
}

// ---- rows (the row_norm and residual_row_norm families: RMSNorm, AddRMSNorm) -----------------------------------------------------------------------

// Sums each of v[] over the threads of one row group (the blockDim.x threads of a threadIdx.y);
// every one of them gets the totals, bit for bit the same. Lanes combine by shuffles within
// groups of up to 32, warps through `scratch` (N floats per warp). Every thread must call it.
template <int N>
__device__ __forceinline__ void group_sum(float (&v)[N], float* scratch) {
  const unsigned width = blockDim.x < 32 ? blockDim.x : 32;
  for (unsigned offset = width / 2; offset > 0; offset >>= 1) {
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] += __shfl_xor_sync(0xffffffffu, v[i], offset);
  }
  if (blockDim.x <= 32) return;
  const unsigned warps = blockDim.x / 32;
  float* mine = scratch + threadIdx.y * warps * N;
  __syncthreads();  // scratch may still be read for the previous row
  if (threadIdx.x % 32 == 0) {
#pragma unroll
    for (int i = 0; i < N; ++i) mine[(threadIdx.x / 32) * N + i] = v[i];
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < N; ++i) {
    float total = 0.0f;
    for (unsigned w = 0; w < warps; ++w) total += mine[w * N + i];
    v[i] = total;
  }
}

// The row helpers take packets by value: a packet read from global memory through a reference is
// read element by element, a copy is one vector load.
template <int kVec, class T>
__device__ __forceinline__ void add_squares(float& sum, Packet<T, kVec> x) {
#pragma unroll
  for (int k = 0; k < kVec; ++k) sum += to_float(x.v[k]) * to_float(x.v[k]);
}

template <int kVec, class T, class TW>
__device__ __forceinline__ Packet<T, kVec> normalized(Packet<T, kVec> x, Packet<TW, kVec> w,
                                                      float inv) {
  Packet<T, kVec> y;
#pragma unroll
  for (int k = 0; k < kVec; ++k) y.v[k] = from_float<T>(to_float(x.v[k]) * inv * to_float(w.v[k]));
  return y;
}

// W's packet p for X's packets of T: one load when W is T; with a float W beside a 16-bit X
// (a mixed-dtype call), kVec float loads: W's float packet would be twice as wide as the alignment
// checked for X's.
template <int kVec, class T, class TW>
__device__ __forceinline__ Packet<TW, kVec> weight_packet(const TW* w, int64_t p) {
  if constexpr (std::is_same_v<T, TW>) {
    return reinterpret_cast<const Packet<TW, kVec>*>(w)[p];
  } else {
    Packet<TW, kVec> packet;
#pragma unroll
    for (int k = 0; k < kVec; ++k) packet.v[k] = w[p * kVec + k];
    return packet;
  }
}

// norm.sum(X, R) rounded to T: a residual op's H (AddRMSNorm's X + R), which its norm and its
// backward read (one rounding, as the CPU kernels do).
template <int kVec, class T, class Norm>
__device__ __forceinline__ Packet<T, kVec> added(Packet<T, kVec> x, Packet<T, kVec> r, const Norm& norm) {
  Packet<T, kVec> h;
#pragma unroll
  for (int k = 0; k < kVec; ++k) h.v[k] = from_float<T>(norm.sum(to_float(x.v[k]), to_float(r.v[k])));
  return h;
}

// The row a row kernel normalizes: X's packet p, or with a residual (AddRMSNorm) X + R's.
template <bool kResidual, int kVec, class T, class Norm>
__device__ __forceinline__ Packet<T, kVec> row_input(const Packet<T, kVec>* xr, const Packet<T, kVec>* rr,
                                                     int64_t p, const Norm& norm) {
  if constexpr (kResidual) {
    return added<kVec>(xr[p], rr[p], norm);
  } else {
    return xr[p];
  }
}

// One row group per row (several short rows a block, a whole block on a long one), fp32 sums.
// kCached: a thread's share of the row stays in registers between the sum and the output, so X
// is read once; otherwise X is read again for the output (from L2 for rows of this size).
// kResidual (AddRMSNorm): the row is H = X + R, written to h as it is read; r and h are unused
// otherwise.
// `norm`: the op's functor (math.h: inverse(mean_square) is the row's scale; sum(x, r) H's element).
template <class T, class TW, int kVec, bool kCached, bool kResidual, class Norm>
__global__ void __launch_bounds__(ci::kRowForwardThreads, 1)
    row_norm_forward_kernel(const T* __restrict__ x, const TW* __restrict__ w, T* __restrict__ y,
                            int64_t rows, int64_t cols, int64_t groups, Norm norm,
                            const T* __restrict__ r, T* __restrict__ h) {
  using P = Packet<T, kVec>;
  __shared__ float scratch[32];
  const int64_t ppr = cols / kVec;
  ci::row_visit(this_launch(), block_index(), thread_index(), rows, groups,
                [&](int64_t row, bool live, bool) {
    const int64_t at = live ? row * ppr : 0;
    const P* xr = reinterpret_cast<const P*>(x) + at;
    const P* rr = kResidual ? reinterpret_cast<const P*>(r) + at : nullptr;
    P* hr = kResidual ? reinterpret_cast<P*>(h) + at : nullptr;
    P kept[kCached ? ci::kRowForwardPackets : 1];
    float sum[1] = {0.0f};
    if (live) {
      if constexpr (kCached) {
#pragma unroll
        for (int k = 0; k < ci::kRowForwardPackets; ++k) {
          const int64_t p = ci::row_packet(threadIdx.x, blockDim.x, k);
          if (p >= ppr) continue;
          kept[k] = row_input<kResidual, kVec>(xr, rr, p, norm);
          if constexpr (kResidual) hr[p] = kept[k];
          add_squares<kVec>(sum[0], kept[k]);
        }
      } else {
        for (int64_t p = threadIdx.x; p < ppr; p += blockDim.x) {
          const P v = row_input<kResidual, kVec>(xr, rr, p, norm);
          if constexpr (kResidual) hr[p] = v;
          add_squares<kVec>(sum[0], v);
        }
      }
    }
    group_sum(sum, scratch);
    const float inv = norm.inverse(__fdividef(sum[0], float(cols)));
    if (!live) return;
    P* yr = reinterpret_cast<P*>(y) + at;
    if constexpr (kCached) {
#pragma unroll
      for (int k = 0; k < ci::kRowForwardPackets; ++k) {
        const int64_t p = ci::row_packet(threadIdx.x, blockDim.x, k);
        if (p < ppr) yr[p] = normalized<kVec>(kept[k], weight_packet<kVec, T>(w, p), inv);
      }
    } else {
      // the H this thread wrote (R or X may be H's own buffer: an in-place residual update)
      for (int64_t p = threadIdx.x; p < ppr; p += blockDim.x) {
        yr[p] = normalized<kVec>(kResidual ? P(hr[p]) : P(xr[p]), weight_packet<kVec, T>(w, p), inv);
      }
    }
  });
}

// sums[0] += x^2, sums[1] += dy * w * x
template <int kVec, class T, class TW>
__device__ __forceinline__ void add_backward_sums(float (&sums)[2], Packet<T, kVec> x,
                                                  Packet<T, kVec> g, Packet<TW, kVec> w) {
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    const float xv = to_float(x.v[k]);
    sums[0] += xv * xv;
    sums[1] += to_float(g.v[k]) * to_float(w.v[k]) * xv;
  }
}

// dX = inv * dY * W - X * coef, with coef = inv^3 * mean(dY * W * X); with a residual
// (AddRMSNorm, X is H) plus dH, rounded once.
template <bool kResidual, int kVec, class T, class TW>
__device__ __forceinline__ Packet<T, kVec> input_grad(Packet<T, kVec> x, Packet<T, kVec> g,
                                                      Packet<TW, kVec> w, float inv, float coef,
                                                      const Packet<T, kVec>* dh, int64_t p) {
  Packet<T, kVec> dx;
  Packet<T, kVec> extra;
  if constexpr (kResidual) extra = dh[p];
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    const float g_x = inv * to_float(g.v[k]) * to_float(w.v[k]) - to_float(x.v[k]) * coef;
    dx.v[k] = from_float<T>(kResidual ? g_x + to_float(extra.v[k]) : g_x);
  }
  return dx;
}

// dX of each row, and for each row group g its partial dW row partial_dw[g] = sum over its rows,
// in row order, of dY * X * inv (no atomics; dw_sum_kernel adds the partial rows in group order).
// kCached: the row's X and dY stay in registers and the partial dW too (each thread owns the same
// columns on every row of its group); otherwise the partial row is accumulated in place.
// kResidual (AddRMSNorm): the row is H = X + R, dX gets dH added and dR is written as dX.
template <class T, class TW, int kVec, bool kCached, bool kResidual, class Norm>
__global__ void __launch_bounds__(ci::kRowBackwardThreads, 1)
    row_norm_backward_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                             const TW* __restrict__ w, T* __restrict__ dx,
                             float* __restrict__ partial_dw, int64_t rows, int64_t cols,
                             int64_t groups, Norm norm, const T* __restrict__ r,
                             const T* __restrict__ dh, T* __restrict__ dr) {
  using P = Packet<T, kVec>;
  constexpr int kKept = kCached ? ci::kRowBackwardPackets : 1;
  __shared__ float scratch[2 * 32];
  const int64_t ppr = cols / kVec;
  const int64_t group = int64_t(blockIdx.x) * blockDim.y + threadIdx.y;
  float dw[kKept][kVec] = {};
  ci::row_visit(this_launch(), block_index(), thread_index(), rows, groups,
                [&](int64_t row, bool live, bool first) {
    const int64_t at = live ? row * ppr : 0;
    const P* xr = reinterpret_cast<const P*>(x) + at;
    const P* rr = kResidual ? reinterpret_cast<const P*>(r) + at : nullptr;
    const P* dhr = kResidual ? reinterpret_cast<const P*>(dh) + at : nullptr;
    P* drr = kResidual ? reinterpret_cast<P*>(dr) + at : nullptr;
    const P* gr = reinterpret_cast<const P*>(dy) + at;
    P kept_x[kKept], kept_g[kKept];
    float sums[2] = {0.0f, 0.0f};
    if (live) {
      if constexpr (kCached) {
#pragma unroll
        for (int k = 0; k < kKept; ++k) {
          const int64_t p = ci::row_packet(threadIdx.x, blockDim.x, k);
          if (p >= ppr) continue;
          kept_x[k] = row_input<kResidual, kVec>(xr, rr, p, norm);
          kept_g[k] = gr[p];
          add_backward_sums<kVec>(sums, kept_x[k], kept_g[k], weight_packet<kVec, T>(w, p));
        }
      } else {
        for (int64_t p = threadIdx.x; p < ppr; p += blockDim.x) {
          add_backward_sums<kVec>(sums, row_input<kResidual, kVec>(xr, rr, p, norm), gr[p],
                                  weight_packet<kVec, T>(w, p));
        }
      }
    }
    group_sum(sums, scratch);
    const float inv = norm.inverse(__fdividef(sums[0], float(cols)));
    const float coef = __fdividef(sums[1], float(cols)) * inv * inv * inv;  // no underflow
    if (!live) return;
    P* dxr = reinterpret_cast<P*>(dx) + at;
    if constexpr (kCached) {
#pragma unroll
      for (int k = 0; k < kKept; ++k) {
        const int64_t p = ci::row_packet(threadIdx.x, blockDim.x, k);
        if (p >= ppr) continue;
        dxr[p] = input_grad<kResidual, kVec>(kept_x[k], kept_g[k], weight_packet<kVec, T>(w, p), inv, coef,
                                             dhr, p);
        if constexpr (kResidual) drr[p] = dxr[p];
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          dw[k][e] += to_float(kept_g[k].v[e]) * to_float(kept_x[k].v[e]) * inv;
        }
      }
    } else {
      float* partial = partial_dw + group * cols;
      for (int64_t p = threadIdx.x; p < ppr; p += blockDim.x) {
        const P xv = row_input<kResidual, kVec>(xr, rr, p, norm), gv = gr[p];
        dxr[p] = input_grad<kResidual, kVec>(xv, gv, weight_packet<kVec, T>(w, p), inv, coef, dhr, p);
        if constexpr (kResidual) drr[p] = dxr[p];
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          const float before = first ? 0.0f : partial[p * kVec + e];
          partial[p * kVec + e] = before + to_float(gv.v[e]) * to_float(xv.v[e]) * inv;
        }
      }
    }
  });
  if constexpr (kCached) {
    if (group >= groups) return;
    float* partial = partial_dw + group * cols;
#pragma unroll
    for (int k = 0; k < kKept; ++k) {
      const int64_t p = ci::row_packet(threadIdx.x, blockDim.x, k);
      if (p >= ppr) continue;
#pragma unroll
      for (int e = 0; e < kVec; ++e) partial[p * kVec + e] = dw[k][e];
    }
  }
}

// dW[j] = sum over g of partial_dw[g][j]: lane l of a column adds groups l, l + 8, ... in order,
// then the 8 lane sums are added in lane order. Fixed by (groups, cols): the same bits every run.
// (A template only so that every translation unit may define it.)
template <unsigned kLanes = ci::kDwLanes>
__global__ void __launch_bounds__(ci::kDwColumns * kLanes, 1)
    dw_sum_kernel(const float* __restrict__ partial_dw, float* __restrict__ dw, int64_t groups,
                  int64_t cols) {
  __shared__ float lanes[kLanes][ci::kDwColumns];
  ci::column_tiles(this_launch(), block_index(), cols, [&](int64_t first) {
    const int64_t j = first + threadIdx.x;
    float sum = 0.0f;
    if (j < cols) {
      ci::lane_groups(this_launch(), thread_index(), groups,
                      [&](int64_t g) { sum += partial_dw[g * cols + j]; });
    }
    lanes[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y == 0 && j < cols) {
      float total = 0.0f;
      for (unsigned l = 0; l < kLanes; ++l) total += lanes[l][threadIdx.x];
      dw[j] = total;
    }
    __syncthreads();
  });
}

}  // namespace detail

// Any elementwise op (its functor `fn` of math.h): Y = fn.value(X), n elements.
template <class T, class Fn>
cudaError_t elementwise_forward(const T* x, T* y, int64_t n, Fn fn, cudaStream_t s) {
  return detail::launch_elementwise<T, detail::ValueOp<Fn>, 1>(detail::ValueOp<Fn>{fn}, x, nullptr, y, n, s);
}

// dX = dY * fn.slope(X)
template <class T, class Fn>
cudaError_t elementwise_backward(const T* dy, const T* x, T* dx, int64_t n, Fn fn, cudaStream_t s) {
  return detail::launch_elementwise<T, detail::SlopeOp<Fn>, 2>(detail::SlopeOp<Fn>{fn}, x, dy, dx, n, s);
}

// X [rows, 2d] -> Y [rows, d], Y = gate(A) * B (a gated op's functor of math.h: SwiGLUMath<>, ...)
template <class T, class Gate>
cudaError_t gated_forward(const T* x, T* y, int64_t rows, int64_t d, Gate gate, cudaStream_t s) {
  if (rows == 0 || d == 0) return cudaSuccess;
  const int vec = cuda_index::row_packet_elems(sizeof(T), d, detail::address_bits(x, y));
  return detail::with_packet<T>(vec, [&](auto packet) {
    constexpr int kVec = decltype(packet)::value;
    const cuda_index::Launch l = cuda_index::gated_launch(rows, d / kVec);
    detail::gated_forward_kernel<T, kVec, Gate>
        <<<detail::grid_of(l), detail::block_of(l), 0, s>>>(x, y, rows, d, gate);
    return cudaGetLastError();
  });
}

template <class T, class Gate>
cudaError_t gated_backward(const T* dy, const T* x, T* dx, int64_t rows, int64_t d, Gate gate,
                           cudaStream_t s) {
  if (rows == 0 || d == 0) return cudaSuccess;
  const int vec = cuda_index::row_packet_elems(sizeof(T), d, detail::address_bits(dy, x, dx));
  return detail::with_packet<T>(vec, [&](auto packet) {
    constexpr int kVec = decltype(packet)::value;
    const cuda_index::Launch l = cuda_index::gated_launch(rows, d / kVec);
    detail::gated_backward_kernel<T, kVec, Gate>
        <<<detail::grid_of(l), detail::block_of(l), 0, s>>>(dy, x, dx, rows, d, gate);
    return cudaGetLastError();
  });
}

// A row_norm op (its functor `norm` of math.h): Y = X * norm.inverse(mean(X^2)) * W, [rows, cols].
// W is T, or float with a __half / __nv_bfloat16 X (a mixed-dtype call, computed in float).
template <class T, class TW, class Norm>
cudaError_t row_norm_forward(const T* x, const TW* w, T* y, int64_t rows, int64_t cols, Norm norm,
                             cudaStream_t s) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  const int vec = cuda_index::row_packet_elems(sizeof(T), cols, detail::address_bits(x, w, y));
  return detail::with_packet<T>(vec, [&](auto packet) {
    constexpr int kVec = decltype(packet)::value;
    const cuda_index::RowLaunch l = cuda_index::rms_forward_launch(rows, cols / kVec);
    const auto kernel = l.cached ? detail::row_norm_forward_kernel<T, TW, kVec, true, false, Norm>
                                 : detail::row_norm_forward_kernel<T, TW, kVec, false, false, Norm>;
    kernel<<<detail::grid_of(l.launch), detail::block_of(l.launch), 0, s>>>(x, w, y, rows, cols,
                                                                             l.groups, norm, nullptr, nullptr);
    return cudaGetLastError();
  });
}

// A residual_row_norm op: H = norm.sum(X, R) (rounded to T) and Y = the row norm of H, [rows, cols]
// each, in one pass over X and R.
template <class T, class TW, class Norm>
cudaError_t residual_row_norm_forward(const T* x, const T* r, const TW* w, T* y, T* h, int64_t rows,
                                      int64_t cols, Norm norm, cudaStream_t s) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  const int vec = cuda_index::row_packet_elems(sizeof(T), cols, detail::address_bits(x, r, w, y, h));
  return detail::with_packet<T>(vec, [&](auto packet) {
    constexpr int kVec = decltype(packet)::value;
    const cuda_index::RowLaunch l = cuda_index::rms_forward_launch(rows, cols / kVec);
    const auto kernel = l.cached ? detail::row_norm_forward_kernel<T, TW, kVec, true, true, Norm>
                                 : detail::row_norm_forward_kernel<T, TW, kVec, false, true, Norm>;
    kernel<<<detail::grid_of(l.launch), detail::block_of(l.launch), 0, s>>>(x, w, y, rows, cols,
                                                                             l.groups, norm, r, h);
    return cudaGetLastError();
  });
}

// Bytes of the float32 workspace row_norm_backward (and residual_row_norm_backward) needs for X [rows, cols]: one partial dW row
// per row group (cuda_index::dw_groups(rows) <= 512 of them). The caller allocates it (4-byte
// aligned) on the stream's device; its contents need no initialization.
inline size_t row_norm_backward_workspace_size(int64_t rows, int64_t cols) {
  return size_t(cuda_index::dw_groups(rows)) * size_t(cols) * sizeof(float);
}

namespace detail {

// RMSNorm's backward over rows, with a residual (kResidual: the row is H = X + R, dH is added to dX
// and dR written as dX) or without; dW through the partial rows of `workspace`, summed in order.
template <bool kResidual, class T, class TW, class Norm>
cudaError_t row_backward(const T* dy, const T* dh, const T* x, const T* r, const TW* w, T* dx, T* dr,
                         float* dw, void* workspace, int64_t rows, int64_t cols, Norm norm,
                         cudaStream_t s) {
  if (cols == 0) return cudaSuccess;
  if (rows == 0) return cudaMemsetAsync(dw, 0, size_t(cols) * sizeof(float), s);
  float* partial_dw = static_cast<float*>(workspace);
  const int vec = cuda_index::row_packet_elems(sizeof(T), cols, address_bits(dy, dh, x, r, w, dx, dr));
  const cudaError_t rows_done = with_packet<T>(vec, [&](auto packet) {
    constexpr int kVec = decltype(packet)::value;
    const cuda_index::RowLaunch l = cuda_index::rms_backward_launch(rows, cols / kVec);
    const auto kernel = l.cached ? row_norm_backward_kernel<T, TW, kVec, true, kResidual, Norm>
                                 : row_norm_backward_kernel<T, TW, kVec, false, kResidual, Norm>;
    kernel<<<grid_of(l.launch), block_of(l.launch), 0, s>>>(dy, x, w, dx, partial_dw, rows, cols,
                                                            l.groups, norm, r, dh, dr);
    return cudaGetLastError();
  });
  if (rows_done != cudaSuccess) return rows_done;
  const cuda_index::Launch sum = cuda_index::dw_sum_launch(cols);
  dw_sum_kernel<><<<grid_of(sum), block_of(sum), 0, s>>>(partial_dw, dw, cuda_index::dw_groups(rows), cols);
  return cudaGetLastError();
}

}  // namespace detail

// dX [rows, cols] and dW [cols] (float32, fully written, also for rows == 0) of a row_norm op,
// deterministic: the same bits on every run for the same inputs and pointers' alignment; its
// workspace is row_norm_backward_workspace_size(rows, cols). The derivative of norm.inverse(m) is
// taken as -inverse^3 / 2 (an inverse square root's).
template <class T, class TW, class Norm>
cudaError_t row_norm_backward(const T* dy, const T* x, const TW* w, T* dx, float* dw, void* workspace,
                              int64_t rows, int64_t cols, Norm norm, cudaStream_t s) {
  return detail::row_backward<false, T>(dy, nullptr, x, nullptr, w, dx, nullptr, dw, workspace, rows,
                                        cols, norm, s);
}

// dX and dR [rows, cols] of a residual_row_norm op (the same values: the row norm's dX at H, plus
// dH) and dW [cols] (float32, fully written), deterministic as row_norm_backward, with its workspace.
template <class T, class TW, class Norm>
cudaError_t residual_row_norm_backward(const T* dy, const T* dh, const T* x, const T* r, const TW* w, T* dx,
                                       T* dr, float* dw, void* workspace, int64_t rows, int64_t cols,
                                       Norm norm, cudaStream_t s) {
  return detail::row_backward<true, T>(dy, dh, x, r, w, dx, dr, dw, workspace, rows, cols, norm, s);
}

}  // namespace opforge::kernels::cuda
