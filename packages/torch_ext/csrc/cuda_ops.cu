// CUDA kernels: validation, contiguity, device guard and stream here; the math is kernels/ cuda.cuh.
#include <opforge/kernels/cuda.cuh>

#include <torch/csrc/stable/accelerator.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "common.h"

namespace opforge_torch {
namespace {

namespace k = opforge::kernels::cuda;

template <class Fn>
void dispatch(ScalarType t, Fn&& fn) {
  switch (t) {
    case ScalarType::Float: return fn(float{});
    case ScalarType::Half: return fn(__half{});
    case ScalarType::BFloat16: return fn(__nv_bfloat16{});
    default: fail("kernel", "dtype", "a checked dtype", torch::headeronly::toString(t));
  }
}

template <class T>
const T* in(const Tensor& t) { return static_cast<const T*>(t.const_data_ptr()); }
template <class T>
T* out(const Tensor& t) { return static_cast<T*>(t.mutable_data_ptr()); }

// The caller's current stream on x's device (torch's stream semantics, not the legacy default).
cudaStream_t current_stream(const Tensor& x) {
  void* stream = nullptr;
  TORCH_ERROR_CODE_CHECK(aoti_torch_get_current_cuda_stream(x.get_device_index(), &stream));
  return static_cast<cudaStream_t>(stream);
}

void check_launch(const char* op, cudaError_t err) {
  if (err != cudaSuccess) fail(op, "CUDA kernel launch", "cudaSuccess", cudaGetErrorString(err));
}

// y: contiguous, X's shape; the caller holds the device guard.
void swish_into(const Tensor& x, double beta, Tensor& y) {
  // An empty launch grid is a CUDA error, and there is nothing to compute.
  if (x.numel() > 0) dispatch(x.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    check_launch(kSwish, k::swish_forward<T>(in<T>(x), out<T>(y), x.numel(),
                                             static_cast<float>(beta), current_stream(x)));
  });
}

Tensor swish(const Tensor& x_in, double beta) {
  check_swish(Backend::CUDA, x_in, beta);
  torch::stable::accelerator::DeviceGuard guard(x_in.get_device_index());
  const Tensor x = torch::stable::contiguous(x_in);
  Tensor y = torch::stable::new_empty(x, x.sizes());
  swish_into(x, beta, y);
  return y;
}

Tensor swish_out(const Tensor& x_in, double beta, Tensor out) {
  check_swish(Backend::CUDA, x_in, beta);
  check_out(kSwish, out, x_in, shape_of(x_in));
  torch::stable::accelerator::DeviceGuard guard(x_in.get_device_index());
  const Tensor x = torch::stable::contiguous(x_in);
  return write_into(out, x, shape_of(x), [&](Tensor& y) { swish_into(x, beta, y); });
}

// y: contiguous [..., d] for X [..., 2d].
void swiglu_into(const Tensor& x, double beta, Tensor& y) {
  const RowShape s = row_shape(x);
  if (x.numel() > 0) dispatch(x.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    check_launch(kSwiGLU, k::swiglu_forward<T>(in<T>(x), out<T>(y), s.rows, s.cols / 2,
                                               static_cast<float>(beta), current_stream(x)));
  });
}

Tensor swiglu(const Tensor& x_in, double beta) {
  check_swiglu(Backend::CUDA, x_in, beta);
  torch::stable::accelerator::DeviceGuard guard(x_in.get_device_index());
  const Tensor x = torch::stable::contiguous(x_in);
  Tensor y = torch::stable::new_empty(x, swiglu_output_shape(x));
  swiglu_into(x, beta, y);
  return y;
}

Tensor swiglu_out(const Tensor& x_in, double beta, Tensor out) {
  check_swiglu(Backend::CUDA, x_in, beta);
  check_out(kSwiGLU, out, x_in, swiglu_output_shape(x_in));
  torch::stable::accelerator::DeviceGuard guard(x_in.get_device_index());
  const Tensor x = torch::stable::contiguous(x_in);
  return write_into(out, x, swiglu_output_shape(x), [&](Tensor& y) { swiglu_into(x, beta, y); });
}

Tensor swiglu_backward(const Tensor& dy_in, const Tensor& x_in, double beta) {
  check_swiglu_backward(Backend::CUDA, dy_in, x_in, beta);
  torch::stable::accelerator::DeviceGuard guard(x_in.get_device_index());
  const Tensor x = torch::stable::contiguous(x_in);
  const Tensor dy = torch::stable::contiguous(dy_in);
  Tensor dx = torch::stable::new_empty(x, x.sizes());
  const RowShape s = row_shape(x);
  if (x.numel() > 0) dispatch(x.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    check_launch(kSwiGLU, k::swiglu_backward<T>(in<T>(dy), in<T>(x), out<T>(dx), s.rows,
                                                s.cols / 2, static_cast<float>(beta),
                                                current_stream(x)));
  });
  return dx;
}

Tensor swish_backward(const Tensor& dy_in, const Tensor& x_in, double beta) {
  check_swish_backward(Backend::CUDA, dy_in, x_in, beta);
  torch::stable::accelerator::DeviceGuard guard(x_in.get_device_index());
  const Tensor x = torch::stable::contiguous(x_in);
  const Tensor dy = torch::stable::contiguous(dy_in);
  Tensor dx = torch::stable::new_empty(x, x.sizes());
  if (x.numel() > 0) dispatch(x.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    check_launch(kSwish, k::swish_backward<T>(in<T>(dy), in<T>(x), out<T>(dx), x.numel(),
                                              static_cast<float>(beta), current_stream(x)));
  });
  return dx;
}

void rms_norm_into(const Tensor& x, const Tensor& w, double epsilon, Tensor& y) {
  const RowShape s = row_shape(x);
  if (x.numel() > 0) dispatch(x.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    check_launch(kRMSNorm, k::rms_norm_forward<T>(in<T>(x), in<T>(w), out<T>(y), s.rows, s.cols,
                                                  static_cast<float>(epsilon), current_stream(x)));
  });
}

Tensor rms_norm(const Tensor& x_in, const Tensor& w_in, double epsilon) {
  check_rms_norm(Backend::CUDA, x_in, w_in, epsilon);
  torch::stable::accelerator::DeviceGuard guard(x_in.get_device_index());
  const Tensor x = torch::stable::contiguous(x_in);
  const Tensor w = torch::stable::contiguous(w_in);
  Tensor y = torch::stable::new_empty(x, x.sizes());
  rms_norm_into(x, w, epsilon, y);
  return y;
}

Tensor rms_norm_out(const Tensor& x_in, const Tensor& w_in, double epsilon, Tensor out) {
  check_rms_norm(Backend::CUDA, x_in, w_in, epsilon);
  check_out(kRMSNorm, out, x_in, shape_of(x_in));
  torch::stable::accelerator::DeviceGuard guard(x_in.get_device_index());
  const Tensor x = torch::stable::contiguous(x_in);
  const Tensor w = torch::stable::contiguous(w_in);
  return write_into(out, x, shape_of(x), [&](Tensor& y) { rms_norm_into(x, w, epsilon, y); });
}

// dW accumulates in float32 (atomics in the kernel), then is cast to W's dtype.
std::tuple<Tensor, Tensor> rms_norm_backward(const Tensor& dy_in, const Tensor& x_in,
                                             const Tensor& w_in, double epsilon) {
  check_rms_norm_backward(Backend::CUDA, dy_in, x_in, w_in, epsilon);
  torch::stable::accelerator::DeviceGuard guard(x_in.get_device_index());
  const Tensor x = torch::stable::contiguous(x_in);
  const Tensor w = torch::stable::contiguous(w_in);
  const Tensor dy = torch::stable::contiguous(dy_in);
  Tensor dx = torch::stable::new_empty(x, x.sizes());
  const RowShape s = row_shape(x);
  Tensor dw = torch::stable::new_zeros(x, {s.cols}, ScalarType::Float);
  if (x.numel() > 0) dispatch(x.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    check_launch(kRMSNorm,
                 k::rms_norm_backward<T>(in<T>(dy), in<T>(x), in<T>(w), out<T>(dx), out<float>(dw),
                                         s.rows, s.cols, static_cast<float>(epsilon),
                                         current_stream(x)));
  });
  return {dx, torch::stable::to(dw, w.scalar_type())};
}

}  // namespace
}  // namespace opforge_torch

STABLE_TORCH_LIBRARY_IMPL(opforge, CUDA, m) {
  m.impl("swish", TORCH_BOX(&opforge_torch::swish));
  m.impl("swish_backward", TORCH_BOX(&opforge_torch::swish_backward));
  m.impl("swish.out", TORCH_BOX(&opforge_torch::swish_out));
  m.impl("swiglu", TORCH_BOX(&opforge_torch::swiglu));
  m.impl("swiglu.out", TORCH_BOX(&opforge_torch::swiglu_out));
  m.impl("swiglu_backward", TORCH_BOX(&opforge_torch::swiglu_backward));
  m.impl("rms_norm", TORCH_BOX(&opforge_torch::rms_norm));
  m.impl("rms_norm.out", TORCH_BOX(&opforge_torch::rms_norm_out));
  m.impl("rms_norm_backward", TORCH_BOX(&opforge_torch::rms_norm_backward));
}
