// Runs the shared CUDA launchers (cuda.cuh) on the GPU for the GPU tests (test_gpu_kernels.py),
// through a C ABI on host buffers. Each device buffer sits `offset` elements past a 16-byte
// boundary (an unaligned view for an odd offset) inside a larger allocation whose other bytes are
// checked untouched afterwards; inputs are checked unchanged, outputs start as 0xFF bytes. Every
// launch goes to a non-blocking stream of this shim's own.
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "../family_launch.h"

namespace c = opforge::kernels::cuda;
using opforge_test::is_gated;
using opforge_test::is_residual;
using opforge_test::is_weighted;

namespace {

// kFloat16W32, kBFloat16W32: that X with a float32 W (cuda_harness.py MIXED_DTYPES).
enum Dtype { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2, kFloat16W32 = 3, kBFloat16W32 = 4 };
// Besides CUDA's own error codes (positive):
constexpr int kBytesTouched = -100;  // a byte outside an output, or of an input, changed
constexpr int kNoMemory = -101;      // not enough free device memory for the test
constexpr int kRanEarly = 1, kNeverRan = 2, kHostBlocked = 3;  // stream_order's verdicts
constexpr size_t kGuard = 256;       // bytes around each buffer; keeps its base 256-byte aligned

struct Buffer {
  char* base = nullptr;
  size_t offset = 0, bytes = 0;      // the data: base + kGuard + offset, `bytes` long
  bool written = false;              // an output: its data may change
  void* host = nullptr;              // where an output is copied back to
  std::vector<unsigned char> before;  // the whole allocation as written
  char* data() const { return base + kGuard + offset; }
  size_t total() const { return kGuard + offset + bytes + kGuard; }
};

// Device buffers for one launch, copied in and out on its own stream.
class Launch {
 public:
  Launch() { check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~Launch() {
    for (Buffer& b : buffers_) cudaFree(b.base);
    if (stream_) cudaStreamDestroy(stream_);
  }
  Launch(const Launch&) = delete;
  Launch& operator=(const Launch&) = delete;

  cudaStream_t stream() const { return stream_; }
  void check(cudaError_t e) {
    if (status_ == 0 && e != cudaSuccess) status_ = e;
  }

  // n elements of `size` bytes from `host` (nullptr: zeros), `offset` elements into the buffer.
  void* input(const void* host, int64_t n, size_t size, int64_t offset) {
    Buffer& b = add(n, size, offset);
    std::memset(b.before.data() + kGuard + b.offset, 0, b.bytes);
    if (host && b.bytes) std::memcpy(b.before.data() + kGuard + b.offset, host, b.bytes);
    upload(b);
    return b.data();
  }

  // Copied back to `host` (nullptr: checked, then dropped) by finish().
  void* output(void* host, int64_t n, size_t size, int64_t offset) {
    Buffer& b = add(n, size, offset);
    b.written = true;
    b.host = host;
    upload(b);
    return b.data();
  }

  // Uninitialized for the kernel: NaN bytes, which it must not read before writing.
  void* scratch(size_t bytes) {
    char* p = nullptr;
    check(cudaMalloc(&p, bytes ? bytes : 1));
    scratch_.emplace_back(p);
    check(cudaMemsetAsync(p, 0xFF, bytes, stream_));
    return p;
  }

  // After the launch: copies outputs back and checks every byte it should not have written.
  int finish(cudaError_t launched) {
    check(launched);
    std::vector<std::vector<unsigned char>> after(buffers_.size());
    for (size_t i = 0; i < buffers_.size(); ++i) {
      after[i].resize(buffers_[i].total());
      check(cudaMemcpyAsync(after[i].data(), buffers_[i].base, after[i].size(),
                            cudaMemcpyDeviceToHost, stream_));
    }
    check(cudaStreamSynchronize(stream_));
    if (status_) return status_;
    for (size_t i = 0; i < buffers_.size(); ++i) {
      const Buffer& b = buffers_[i];
      const size_t first = kGuard + b.offset, last = first + b.bytes;
      for (size_t k = 0; k < b.total(); ++k) {
        const bool mine = b.written && k >= first && k < last;
        if (!mine && after[i][k] != b.before[k]) return kBytesTouched;
      }
      if (b.host && b.bytes) std::memcpy(b.host, after[i].data() + first, b.bytes);
    }
    return 0;
  }

 private:
  Buffer& add(int64_t n, size_t size, int64_t offset) {
    buffers_.emplace_back();
    Buffer& b = buffers_.back();
    b.offset = size_t(offset) * size;
    b.bytes = size_t(n) * size;
    b.before.assign(b.total(), 0xFF);
    check(cudaMalloc(&b.base, b.total()));
    return b;
  }

  void upload(const Buffer& b) {
    if (b.base) {
      check(cudaMemcpyAsync(b.base, b.before.data(), b.total(), cudaMemcpyHostToDevice, stream_));
    }
  }

  struct Freed {
    char* p;
    explicit Freed(char* q) : p(q) {}
    Freed(Freed&& o) noexcept : p(o.p) { o.p = nullptr; }
    ~Freed() { cudaFree(p); }
  };

  cudaStream_t stream_ = nullptr;
  std::vector<Buffer> buffers_;
  std::vector<Freed> scratch_;
  int status_ = 0;
};

struct Shape {
  int64_t rows, cols;  // X [rows, cols]; SwiGLU: cols = 2d
};

// Enqueues op's forward (backward: dX, and dW for a weighted op) on `s` (family_launch.h).
template <class T, class TW = T>
cudaError_t enqueue(int op, bool backward, Shape x, float attr, void* const* in, void* const* out,
                    void* workspace, cudaStream_t s) {
  return opforge_test::launch_op<T, TW>(op, backward, x.rows, x.cols, attr, in, out, workspace, s);
}

size_t element_size(int dtype) { return dtype == kFloat32 ? 4 : 2; }

cudaError_t enqueue_as(int dtype, int op, bool backward, Shape x, float attr, void* const* in,
                       void* const* out, void* workspace, cudaStream_t s) {
  switch (dtype) {
    case kFloat32: return enqueue<float>(op, backward, x, attr, in, out, workspace, s);
    case kFloat16: return enqueue<__half>(op, backward, x, attr, in, out, workspace, s);
    case kBFloat16: return enqueue<__nv_bfloat16>(op, backward, x, attr, in, out, workspace, s);
    case kFloat16W32: return enqueue<__half, float>(op, backward, x, attr, in, out, workspace, s);
    case kBFloat16W32: return enqueue<__nv_bfloat16, float>(op, backward, x, attr, in, out, workspace, s);
  }
  return cudaErrorInvalidValue;
}

int64_t y_elements(int op, bool backward, Shape x) {
  return is_gated(op) && !backward ? x.rows * (x.cols / 2) : x.rows * x.cols;
}

// The buffers of one op: inputs X, W (RMSNorm, AddRMSNorm), dY (backward), R and dH (AddRMSNorm);
// outputs Y or dX, dW (weighted ops' backward), H or dR (AddRMSNorm); the workspace. Host
// pointers may be nullptr (zero inputs, dropped outputs).
struct Tensors {
  void* in[5] = {nullptr, nullptr, nullptr, nullptr, nullptr};
  void* out[3] = {nullptr, nullptr, nullptr};
  void* workspace = nullptr;
};

struct Host {
  const void *x, *w, *dy;
  void* y;
  float* dw;
  const void *r, *dh;
  void* h;
};

Tensors place(Launch& run, int dtype, int op, bool backward, Shape x, const Host& host,
              int64_t in_offset, int64_t out_offset) {
  const size_t size = element_size(dtype);
  Tensors t;
  t.in[0] = run.input(host.x, x.rows * x.cols, size, in_offset);
  const bool w32 = dtype == kFloat16W32 || dtype == kBFloat16W32;
  if (is_weighted(op)) t.in[1] = run.input(host.w, x.cols, w32 ? 4 : size, in_offset);
  if (backward) {
    const int64_t ndy = is_gated(op) ? x.rows * (x.cols / 2) : x.rows * x.cols;
    t.in[2] = run.input(host.dy, ndy, size, in_offset);
  }
  t.out[0] = run.output(host.y, y_elements(op, backward, x), size, out_offset);
  if (is_residual(op)) {
    t.in[3] = run.input(host.r, x.rows * x.cols, size, in_offset);
    if (backward) t.in[4] = run.input(host.dh, x.rows * x.cols, size, in_offset);
    t.out[2] = run.output(host.h, x.rows * x.cols, size, out_offset);
  }
  if (is_weighted(op) && backward) {
    t.out[1] = run.output(host.dw, x.cols, 4, 0);
    t.workspace = run.scratch(c::row_norm_backward_workspace_size(x.rows, x.cols));
  }
  return t;
}

std::atomic<bool> gate_open{false};
std::atomic<bool> gate_timed_out{false};

void CUDART_CB wait_for_gate(void*) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!gate_open.load()) {
    if (std::chrono::steady_clock::now() > deadline) {
      gate_timed_out = true;
      return;
    }
    std::this_thread::yield();
  }
}

__global__ void write_zero(unsigned char* p) { *p = 0; }

// Pinned host copies of an op's outputs (Y or dX, and dW).
struct Pinned {
  unsigned char* y = nullptr;
  unsigned char* dw = nullptr;
  size_t y_bytes, dw_bytes;
  Pinned(size_t yb, size_t dwb, Launch& run) : y_bytes(yb), dw_bytes(dwb) {
    run.check(cudaMallocHost(&y, yb ? yb : 1));
    run.check(cudaMallocHost(&dw, dwb ? dwb : 1));
  }
  ~Pinned() {
    cudaFreeHost(y);
    cudaFreeHost(dw);
  }
  void copy(void* const* out, cudaStream_t s, Launch& run) {
    if (y_bytes) run.check(cudaMemcpyAsync(y, out[0], y_bytes, cudaMemcpyDeviceToHost, s));
    if (dw_bytes) run.check(cudaMemcpyAsync(dw, out[1], dw_bytes, cudaMemcpyDeviceToHost, s));
  }
  bool none_written() const { return unwritten(y, y_bytes) && unwritten(dw, dw_bytes); }
  bool all_written() const {
    return (!y_bytes || !unwritten(y, y_bytes)) && (!dw_bytes || !unwritten(dw, dw_bytes));
  }
  static bool unwritten(const unsigned char* p, size_t n) {  // still the 0xFF the shim wrote
    for (size_t i = 0; i < n; ++i) if (p[i] != 0xFF) return false;
    return true;
  }
};

// Fills n elements with base + ((i % modulus) - modulus / 2) / 1024, rounded to T.
template <class T>
__global__ void fill_pattern(T* p, int64_t n, int64_t modulus, float base) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    p[i] = __float2half_rn(base + float(i % modulus - modulus / 2) / 1024.0f);
  }
}

}  // namespace

extern "C" {

int opforge_gpu_device_count() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

// One launch of `op` (0 Swish, 1 RMSNorm, 2 SwiGLU, 3 GeGLU, 4 AddRMSNorm) forward or backward on
// host arrays; X is [rows, cols]; dw (float32) for the weighted ops' backward; r, dh and h (H, or
// dR backward) for AddRMSNorm. Inputs and outputs sit at their own offsets
// (a view of a bigger tensor read into a new one, or into another view). Returns 0, a CUDA
// error or a shim status.
int opforge_gpu_run(int op, int backward, int dtype, int64_t in_offset, int64_t out_offset,
                    int64_t rows, int64_t cols, float attr, const void* x, const void* w,
                    const void* dy, void* y, float* dw, const void* r, const void* dh, void* h) {
  Launch run;
  const Shape shape{rows, cols};
  const Tensors t = place(run, dtype, op, backward != 0, shape, Host{x, w, dy, y, dw, r, dh, h},
                          in_offset, out_offset);
  return run.finish(enqueue_as(dtype, op, backward != 0, shape, attr, t.in, t.out, t.workspace,
                               run.stream()));
}

// Whether every launch of `op` waits for the stream it is given: the stream is held by a host
// function until the outputs have been read back from another stream. 0: held, then ran;
// kRanEarly: an output changed while the stream was held (a launch went to another stream);
// kNeverRan; kHostBlocked: the launcher waited for the held stream itself (it synchronized).
int opforge_gpu_stream_order(int op, int backward, int dtype, int64_t rows, int64_t cols,
                             int control) {
  Launch run;
  const Shape shape{rows, cols};
  const Tensors t = place(run, dtype, op, backward != 0, shape, Host{}, 0, 0);
  const size_t y_bytes = size_t(y_elements(op, backward != 0, shape)) * element_size(dtype);
  const size_t dw_bytes = t.out[1] ? size_t(cols) * 4 : 0;
  // pinned, allocated before the stream is held: pageable copies and host allocations may wait
  Pinned early(y_bytes, dw_bytes, run), late(y_bytes, dw_bytes, run);
  cudaStream_t peek = nullptr;
  run.check(cudaStreamCreateWithFlags(&peek, cudaStreamNonBlocking));
  run.check(cudaStreamSynchronize(run.stream()));
  gate_open = false;
  gate_timed_out = false;
  run.check(cudaLaunchHostFunc(run.stream(), wait_for_gate, nullptr));
  if (control) {  // the harness's own check: a launch on the legacy default stream is seen
    write_zero<<<1, 1, 0, cudaStreamLegacy>>>(static_cast<unsigned char*>(t.out[0]));
    run.check(cudaGetLastError());
  } else {
    run.check(enqueue_as(dtype, op, backward != 0, shape, 1.0f, t.in, t.out, t.workspace,
                         run.stream()));
  }
  // a launch on a default stream has finished by now (they do not wait for non-blocking streams)
  run.check(cudaStreamSynchronize(cudaStreamLegacy));
  run.check(cudaStreamSynchronize(cudaStreamPerThread));
  early.copy(t.out, peek, run);
  run.check(cudaStreamSynchronize(peek));
  const bool blocked = gate_timed_out.load();
  gate_open = true;
  late.copy(t.out, run.stream(), run);
  run.check(cudaStreamSynchronize(run.stream()));
  run.check(cudaStreamDestroy(peek));
  const int status = run.finish(cudaSuccess);
  if (status) return status > 0 ? -status : status;
  if (blocked) return kHostBlocked;
  if (!early.none_written()) return kRanEarly;
  if (!late.all_written()) return kNeverRan;
  return 0;
}

// `op` on a float16 X [rows, cols] too large to copy (beyond 2^31 elements): X, W and dY are
// filled on the device by fill_pattern (X: modulus 8191; W: 7, base 1; dY: 509), then the output
// rows `samples` are copied to `out` (each of the output's row length). kNoMemory when the
// device lacks the memory.
int opforge_gpu_large(int op, int backward, int64_t rows, int64_t cols, const int64_t* samples,
                      int nsamples, void* out) {
  const Shape shape{rows, cols};
  const int64_t n = rows * cols, ny = y_elements(op, backward != 0, shape);
  const int64_t ndy = is_gated(op) ? rows * (cols / 2) : n;
  const size_t workspace = is_weighted(op) && backward ? c::row_norm_backward_workspace_size(rows, cols) : 0;
  const int64_t nh = is_residual(op) ? n : 0;  // H (dR); X serves as R too, dY as dH
  const size_t need = size_t(n + ny + nh + (backward ? ndy : 0) + cols) * 2 + workspace + size_t(cols) * 4;
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) return cudaErrorUnknown;
  if (free_bytes < need + (size_t(1) << 30)) return kNoMemory;
  __half *x = nullptr, *w = nullptr, *dy = nullptr, *y = nullptr, *h = nullptr;
  float* dw = nullptr;
  void* ws = nullptr;
  cudaError_t e = cudaMalloc(&x, size_t(n) * 2);
  if (!e) e = cudaMalloc(&y, size_t(ny) * 2);
  if (!e && is_weighted(op)) e = cudaMalloc(&w, size_t(cols) * 2);
  if (!e && nh) e = cudaMalloc(&h, size_t(nh) * 2);
  if (!e && backward) e = cudaMalloc(&dy, size_t(ndy) * 2);
  if (!e && is_weighted(op) && backward) e = cudaMalloc(&dw, size_t(cols) * 4);
  if (!e && workspace) e = cudaMalloc(&ws, workspace);
  if (!e) {
    fill_pattern<<<4096, 256>>>(x, n, 8191, 0.0f);
    if (w) fill_pattern<<<64, 256>>>(w, cols, 7, 1.0f);
    if (dy) fill_pattern<<<4096, 256>>>(dy, ndy, 509, 0.0f);
    e = cudaGetLastError();
  }
  if (!e) {
    void* in[5] = {x, w, dy, x, dy};
    void* outs[3] = {y, dw, h};
    e = enqueue<__half>(op, backward != 0, shape, is_weighted(op) ? 1e-6f : 1.0f, in, outs, ws, nullptr);
  }
  const int64_t row_length = ny / rows;
  for (int i = 0; !e && i < nsamples; ++i) {
    e = cudaMemcpy(static_cast<char*>(out) + size_t(i) * row_length * 2, y + samples[i] * row_length,
                   size_t(row_length) * 2, cudaMemcpyDeviceToHost);
  }
  if (!e) e = cudaDeviceSynchronize();
  for (void* p : {static_cast<void*>(x), static_cast<void*>(w), static_cast<void*>(dy),
                  static_cast<void*>(y), static_cast<void*>(dw), static_cast<void*>(h), ws}) cudaFree(p);
  return e;
}

}  // extern "C"
