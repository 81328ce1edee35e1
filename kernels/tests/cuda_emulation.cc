// The CUDA kernels of cuda.cuh executed on the CPU: their source compiled as host code, each
// <<<grid, block, smem, stream>>> rewritten (test_cuda_emulated.py) into emulated_launch(). The
// blocks run one after another; a block's threads are fibers on one OS thread that switch only
// at __syncthreads and warp shuffles, so every barrier and shuffle has CUDA's meaning for these
// kernels (all threads of a block reach each one), and __shared__ memory is one per block. The
// C ABI is the GPU shim's (gpu/gpu_shim.cu) opforge_gpu_run, on host memory.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <ucontext.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __launch_bounds__
#define __global__
#define __device__
#define __host__
#define __shared__ static
#define __launch_bounds__(...)

// What the kernels and launchers use of CUDA beyond the headers' host parts.
uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;

namespace emulation {

constexpr size_t kStackBytes = 64 << 10;

struct Fiber {
  ucontext_t context;
  std::unique_ptr<char[]> stack{new char[kStackBytes]};
  uint3 index;
  bool done;
};

ucontext_t scheduler;
std::vector<Fiber> fibers;
size_t current = 0;
std::function<void()> body;
std::vector<float> lanes;  // one slot a thread for the shuffles

void run_fiber() {
  body();
  fibers[current].done = true;
  swapcontext(&fibers[current].context, &scheduler);
}

// Back to the scheduler until every thread of the block has arrived.
void barrier() { swapcontext(&fibers[current].context, &scheduler); }

// Every thread of one block: round after round, each unfinished fiber runs to its next barrier.
void run_block(dim3 block, const std::function<void()>& kernel) {
  const size_t threads = size_t(block.x) * block.y;
  if (fibers.size() < threads) fibers.resize(threads);
  lanes.assign(threads, 0.0f);
  body = kernel;
  for (size_t i = 0; i < threads; ++i) {
    Fiber& f = fibers[i];
    getcontext(&f.context);
    f.context.uc_stack.ss_sp = f.stack.get();
    f.context.uc_stack.ss_size = kStackBytes;
    f.context.uc_link = nullptr;
    makecontext(&f.context, run_fiber, 0);
    f.index = uint3{unsigned(i % block.x), unsigned(i / block.x), 0};
    f.done = false;
  }
  for (size_t finished = 0; finished < threads;) {
    finished = 0;
    for (size_t i = 0; i < threads; ++i) {
      if (fibers[i].done) {
        ++finished;
        continue;
      }
      current = i;
      threadIdx = fibers[i].index;
      swapcontext(&scheduler, &fibers[i].context);
    }
  }
}

template <class... Params>
auto launch(void (*kernel)(Params...), dim3 grid, dim3 block) {
  return [=](auto... args) {
    gridDim = grid;
    blockDim = block;
    for (unsigned by = 0; by < grid.y; ++by) {
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        blockIdx = uint3{bx, by, 0};
        run_block(block, [&] { kernel(args...); });
      }
    }
  };
}

}  // namespace emulation

template <class Kernel>
auto emulated_launch(Kernel kernel, dim3 grid, dim3 block, size_t, cudaStream_t) {
  return emulation::launch(kernel, grid, block);
}

inline void __syncthreads() { emulation::barrier(); }

inline float __shfl_xor_sync(unsigned, float v, int offset) {
  const size_t me = emulation::current;
  emulation::lanes[me] = v;
  emulation::barrier();
  const float other = emulation::lanes[me ^ size_t(offset)];
  emulation::barrier();
  return other;
}

inline float __fdividef(float a, float b) { return a / b; }

#define cudaGetLastError() cudaSuccess
#define cudaMemsetAsync(p, v, n, s) (std::memset((p), (v), (n)), cudaSuccess)

#include "family_launch.h"

namespace c = opforge::kernels::cuda;
using opforge_test::is_gated;
using opforge_test::is_residual;
using opforge_test::is_weighted;

namespace {

// kFloat16W32, kBFloat16W32: that X with a float32 W (cuda_harness.py MIXED_DTYPES).
enum Dtype { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2, kFloat16W32 = 3, kBFloat16W32 = 4 };
constexpr int kBytesTouched = -100;
constexpr size_t kGuard = 256;

// n elements `offset` elements past a 256-byte boundary, inside 0xFF guard bytes.
struct Buffer {
  std::vector<unsigned char> bytes;
  size_t first = 0, size = 0;
  bool written = false;
  void* host = nullptr;
  unsigned char* base() { return bytes.data() + (256 - reinterpret_cast<uintptr_t>(bytes.data()) % 256); }
  void* data() { return base() + kGuard + first; }
};

struct Buffers {
  std::vector<std::unique_ptr<Buffer>> all;

  void* add(const void* host, int64_t n, size_t element, int64_t offset, bool written) {
    all.push_back(std::make_unique<Buffer>());
    Buffer& b = *all.back();
    b.first = size_t(offset) * element;
    b.size = size_t(n) * element;
    b.bytes.assign(256 + kGuard + b.first + b.size + kGuard, 0xFF);
    if (!written) std::memset(b.data(), 0, b.size);
    if (!written && host && b.size) std::memcpy(b.data(), host, b.size);
    b.written = written;
    b.host = written ? const_cast<void*>(host) : nullptr;
    return b.data();
  }

  // Outputs back to the host; 0, or kBytesTouched when a byte outside an output changed.
  int finish(const std::vector<std::vector<unsigned char>>& before) {
    for (size_t i = 0; i < all.size(); ++i) {
      Buffer& b = *all[i];
      const unsigned char* now = b.base();
      const size_t lo = kGuard + b.first, hi = lo + b.size;
      for (size_t k = 0; k < kGuard + b.first + b.size + kGuard; ++k) {
        if (!(b.written && k >= lo && k < hi) && now[k] != before[i][k]) return kBytesTouched;
      }
      if (b.host && b.size) std::memcpy(b.host, b.data(), b.size);
    }
    return 0;
  }

  std::vector<std::vector<unsigned char>> snapshot() {
    std::vector<std::vector<unsigned char>> out;
    for (auto& b : all) out.emplace_back(b->base(), b->base() + kGuard + b->first + b->size + kGuard);
    return out;
  }
};

template <class T, class TW = T>
cudaError_t enqueue(int op, bool backward, int64_t rows, int64_t cols, float attr, void* const* in,
                    void* const* out, void* workspace) {
  return opforge_test::launch_op<T, TW>(op, backward, rows, cols, attr, in, out, workspace, nullptr);
}

}  // namespace

extern "C" int opforge_gpu_device_count() { return 1; }

extern "C" int opforge_gpu_run(int op, int backward, int dtype, int64_t in_offset,
                               int64_t out_offset, int64_t rows, int64_t cols, float attr,
                               const void* x, const void* w, const void* dy, void* y, float* dw,
                               const void* r, const void* dh, void* h) {
  if (!opforge_test::valid_op(op)) return cudaErrorInvalidValue;
  const size_t element = dtype == kFloat32 ? 4 : 2;
  const int64_t ny = is_gated(op) && !backward ? rows * (cols / 2) : rows * cols;
  Buffers buffers;
  void* in[5] = {buffers.add(x, rows * cols, element, in_offset, false), nullptr, nullptr, nullptr, nullptr};
  const bool w32 = dtype == kFloat16W32 || dtype == kBFloat16W32;
  if (is_weighted(op)) in[1] = buffers.add(w, cols, w32 ? 4 : element, in_offset, false);
  if (backward) in[2] = buffers.add(dy, is_gated(op) ? rows * (cols / 2) : rows * cols, element, in_offset, false);
  void* out[3] = {buffers.add(y, ny, element, out_offset, true), nullptr, nullptr};
  if (is_residual(op)) {  // R, H (dR backward), dH
    in[3] = buffers.add(r, rows * cols, element, in_offset, false);
    out[2] = buffers.add(h, rows * cols, element, out_offset, true);
    if (backward) in[4] = buffers.add(dh, rows * cols, element, in_offset, false);
  }
  std::vector<unsigned char> workspace;
  if (is_weighted(op) && backward) {
    out[1] = buffers.add(dw, cols, 4, 0, true);
    // NaN bytes: the kernels must not read what they did not write
    workspace.assign(c::row_norm_backward_workspace_size(rows, cols) + 16, 0xFF);
  }
  const auto before = buffers.snapshot();
  cudaError_t e = cudaErrorInvalidValue;
  switch (dtype) {
    case kFloat32: e = enqueue<float>(op, backward, rows, cols, attr, in, out, workspace.data()); break;
    case kFloat16: e = enqueue<__half>(op, backward, rows, cols, attr, in, out, workspace.data()); break;
    case kBFloat16:
      e = enqueue<__nv_bfloat16>(op, backward, rows, cols, attr, in, out, workspace.data());
      break;
    case kFloat16W32: e = enqueue<__half, float>(op, backward, rows, cols, attr, in, out, workspace.data()); break;
    case kBFloat16W32:
      e = enqueue<__nv_bfloat16, float>(op, backward, rows, cols, attr, in, out, workspace.data());
      break;
  }
  return e != cudaSuccess ? int(e) : buffers.finish(before);
}

// An op of a quantized rows' family (family_launch.h launch_quant_op): X, W (float32 with
// kFloat16W32 / kBFloat16W32), R in; Q (1 byte an element), Scale (float32 per row), H (X's type)
// out, each inside guard bytes; R and H only for a residual op.
extern "C" int opforge_quant_run(int op, int dtype, int64_t rows, int64_t cols, const float* attrs, const void* x,
                                 const void* w, const void* r, void* q, float* scale, void* h) {
  if (!opforge_test::valid_op(op)) return cudaErrorInvalidValue;
  const size_t element = dtype == kFloat32 ? 4 : 2;
  const bool w32 = dtype == kFloat16W32 || dtype == kBFloat16W32;
  Buffers buffers;
  const void* in[3] = {buffers.add(x, rows * cols, element, 0, false), buffers.add(w, cols, w32 ? 4 : element, 0, false),
                       nullptr};
  void* out[3] = {buffers.add(q, rows * cols, 1, 0, true), buffers.add(scale, rows, 4, 0, true), nullptr};
  if (is_residual(op)) {
    in[2] = buffers.add(r, rows * cols, element, 0, false);
    out[2] = buffers.add(h, rows * cols, element, 0, true);
  }
  const auto before = buffers.snapshot();
  namespace t = opforge_test;
  cudaError_t e = cudaErrorInvalidValue;
  switch (dtype) {
    case kFloat32: e = t::launch_quant_op<float>(op, rows, cols, attrs, in, out, nullptr); break;
    case kFloat16: e = t::launch_quant_op<__half>(op, rows, cols, attrs, in, out, nullptr); break;
    case kBFloat16: e = t::launch_quant_op<__nv_bfloat16>(op, rows, cols, attrs, in, out, nullptr); break;
    case kFloat16W32: e = t::launch_quant_op<__half, float>(op, rows, cols, attrs, in, out, nullptr); break;
    case kBFloat16W32: e = t::launch_quant_op<__nv_bfloat16, float>(op, rows, cols, attrs, in, out, nullptr); break;
  }
  return e != cudaSuccess ? int(e) : buffers.finish(before);
}
