// CUDA kernels: validation, contiguity, device guard and stream here; the math is kernels/ cuda.cuh.
#include <opforge/kernels/cuda_arch_guard.h>
#include <opforge/kernels/cuda_ops.cuh>

#include <torch/csrc/stable/accelerator.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "common.h"

namespace opforge_torch {
namespace {

namespace k = opforge::kernels;

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

// Before any launch (the caller holds the device guard): a GPU this build has no code for is
// named, never left to "no kernel image is available". Decided once per device.
void check_device_arch(const char* op) {
  const std::string& error = k::cuda::current_device_arch_error("opforge_torch (libopforge_torch.so.1)");
  if (!error.empty()) throw std::runtime_error(std::string("opforge.") + op + ": " + error);
}

// The stream to launch `op` on: the caller's current stream on x's device (torch's stream
// semantics, not the legacy default), once the device is known to run this library's code.
cudaStream_t launch_stream(const char* op, const Tensor& x) {
  check_device_arch(op);
  void* stream = nullptr;
  TORCH_ERROR_CODE_CHECK(aoti_torch_get_current_cuda_stream(x.get_device_index(), &stream));
  return static_cast<cudaStream_t>(stream);
}

void check_launch(const char* op, cudaError_t err) {
  if (err != cudaSuccess) fail(op, "CUDA kernel launch", "cudaSuccess", cudaGetErrorString(err));
}

// ---- every op: forward, .out and (single-input ops) backward, from the op's kernel binding ----

// y: contiguous, Y's shape; the caller holds the device guard.
template <class Op>
void forward_into(const Tensor& x, const Tensor* w, const Attrs& attrs, Tensor& y) {
  const k::RowView v = row_view(Op::desc, x);
  // An empty launch grid is a CUDA error, and there is nothing to compute.
  if (x.numel() > 0) dispatch(x.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    const k::cuda::Forward<T> args{in<T>(x), w ? in<T>(*w) : nullptr, out<T>(y), v.rows, v.cols,
                                   kernel_attrs(Op::desc, attrs)};
    check_launch(Op::desc.name, Op::forward(args, launch_stream(Op::desc.name, x)));
  });
}

struct Cuda {
  template <class Op>
  static Tensor forward(const Tensor& x_in, const Tensor* w_in, const Attrs& attrs) {
    check_op(Backend::CUDA, Op::desc, x_in, w_in, attrs);
    torch::stable::accelerator::DeviceGuard guard(x_in.get_device_index());
    const Tensor x = torch::stable::contiguous(x_in);
    const Tensor w = w_in ? torch::stable::contiguous(*w_in) : x;
    Tensor y = torch::stable::new_empty(x, output_shape(Op::desc, x));
    forward_into<Op>(x, w_in ? &w : nullptr, attrs, y);
    return y;
  }

  template <class Op>
  static void forward_out(const Tensor& x_in, const Tensor* w_in, const Attrs& attrs, Tensor out) {
    check_op(Backend::CUDA, Op::desc, x_in, w_in, attrs);
    check_out(Op::desc, out, x_in, w_in);
    torch::stable::accelerator::DeviceGuard guard(x_in.get_device_index());
    const Tensor x = torch::stable::contiguous(x_in);
    const Tensor w = w_in ? torch::stable::contiguous(*w_in) : x;
    write_into(out, x, output_shape(Op::desc, x),
               [&](Tensor& y) { forward_into<Op>(x, w_in ? &w : nullptr, attrs, y); });
  }

  template <class Op>
  static Tensor backward(const Tensor& dy_in, const Tensor& x_in, const Attrs& attrs) {
    check_op_backward(Backend::CUDA, Op::desc, dy_in, x_in, nullptr, attrs);
    torch::stable::accelerator::DeviceGuard guard(x_in.get_device_index());
    const Tensor x = torch::stable::contiguous(x_in);
    const Tensor dy = torch::stable::contiguous(dy_in);
    Tensor dx = torch::stable::new_empty(x, x.sizes());
    const k::RowView v = row_view(Op::desc, x);
    if (x.numel() > 0) dispatch(x.scalar_type(), [&](auto tag) {
      using T = decltype(tag);
      const k::cuda::Backward<T> args{in<T>(dy), in<T>(x), out<T>(dx), v.rows, v.cols,
                                      kernel_attrs(Op::desc, attrs)};
      check_launch(Op::desc.name, Op::backward(args, launch_stream(Op::desc.name, x)));
    });
    return dx;
  }
};

// dW is summed in float32 from per-row-group partial rows (the workspace) in a fixed order, so
// its bits are the same on every run; then cast to W's dtype. The kernel writes all of dW.
std::tuple<Tensor, Tensor> rms_norm_backward(const Tensor& dy_in, const Tensor& x_in,
                                             const Tensor& w_in, double epsilon) {
  check_op_backward(Backend::CUDA, k::kRMSNormOp, dy_in, x_in, &w_in, Attrs{epsilon});
  torch::stable::accelerator::DeviceGuard guard(x_in.get_device_index());
  const Tensor x = torch::stable::contiguous(x_in);
  const Tensor w = torch::stable::contiguous(w_in);
  const Tensor dy = torch::stable::contiguous(dy_in);
  Tensor dx = torch::stable::new_empty(x, x.sizes());
  const k::RowView s = row_view(k::kRMSNormOp, x);
  Tensor dw = torch::stable::new_empty(x, {s.cols}, ScalarType::Float);
  const auto partial_floats =
      static_cast<int64_t>(k::cuda::rms_norm_backward_workspace_size(s.rows, s.cols) / sizeof(float));
  Tensor workspace = torch::stable::new_empty(x, {partial_floats}, ScalarType::Float);
  if (s.cols > 0) dispatch(x.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    check_launch(k::kRMSNormOp.name,
                 k::cuda::rms_norm_backward<T>(in<T>(dy), in<T>(x), in<T>(w), out<T>(dx), out<float>(dw),
                                         workspace.mutable_data_ptr(), s.rows, s.cols,
                                         static_cast<float>(epsilon), launch_stream(k::kRMSNormOp.name, x)));
  });
  return {dx, torch::stable::to(dw, w.scalar_type())};
}

}  // namespace
}  // namespace opforge_torch

STABLE_TORCH_LIBRARY_IMPL(opforge, CUDA, m) {
  using opforge_torch::Cuda;
#define OPFORGE_REGISTER_CUDA(Name) OPFORGE_TORCH_REGISTER(Cuda, opforge::kernels::cuda, Name)
  OPFORGE_FOR_EACH_OP(OPFORGE_REGISTER_CUDA)
#undef OPFORGE_REGISTER_CUDA
  m.impl("rms_norm_backward", TORCH_BOX(&opforge_torch::rms_norm_backward));
}
