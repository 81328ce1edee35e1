// CUDA kernels: validation, contiguity, device guard and stream here; the math is kernels/ cuda.cuh.
#include <opforge/kernels/cuda_arch_guard.h>
#include <opforge/kernels/cuda_ops.cuh>

#include <torch/csrc/stable/accelerator.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

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

// Calls fn(w) with W's pointer as the kernels take it: float32 with a 16-bit X (a mixed-dtype call,
// checked: shapes.h weight_dtype_ok), else X's type.
template <class T, class Fn>
auto with_weight(const Tensor& w, Fn&& fn) {
  if constexpr (!std::is_same_v<T, float>) {
    if (w.scalar_type() == ScalarType::Float) return fn(in<float>(w));
  }
  return fn(in<T>(w));
}

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

// src: contiguous; ys: contiguous, the outputs' shapes; the caller holds the device guard.
template <class Op>
void forward_into(const Inputs& src, const Attrs& attrs, std::vector<Tensor>& ys) {
  const Tensor& x = *src.x;
  const k::RowView v = row_view(Op::desc, x);
  // An empty launch grid is a CUDA error, and there is nothing to compute; an empty X may still
  // have rows to write (an output with one value per row: row_view keeps them).
  if (x.numel() > 0 || v.rows > 0) dispatch(x.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    k::cuda::Forward<T> args{in<T>(x), nullptr, out<T>(ys[0]), v.rows, v.cols, kernel_attrs(Op::desc, attrs)};
    if (mixed_weight(src)) args.w_float32 = in<float>(*src.w);
    else if (src.w != nullptr) args.w = in<T>(*src.w);
    if (src.r != nullptr) args.r = in<T>(*src.r);
    if (ys.size() > 1) args.h = out<T>(ys[1]);
    void* outputs[k::kMaxOutputs] = {};  // ys.size() <= kMaxOutputs: attrs.h checks every op
    for (size_t i = 0; i < ys.size(); ++i) outputs[i] = ys[i].mutable_data_ptr();
    args.outputs = outputs;
    check_launch(Op::desc.name, Op::forward(args, launch_stream(Op::desc.name, x)));
  });
}

struct Cuda {
  template <class Op>
  static std::vector<Tensor> forward(const Inputs& given, const Attrs& attrs) {
    check_op(Backend::CUDA, Op::desc, given, attrs);
    torch::stable::accelerator::DeviceGuard guard(given.x->get_device_index());
    const ContiguousInputs inputs(given);
    std::vector<Tensor> ys = new_outputs(Op::desc, *inputs.view().x, attrs);
    forward_into<Op>(inputs.view(), attrs, ys);
    return ys;
  }

  template <class Op>
  static void forward_out(const Inputs& given, const Attrs& attrs, const std::vector<Tensor>& outs) {
    check_op(Backend::CUDA, Op::desc, given, attrs);
    check_outs(Op::desc, outs, given, attrs);
    torch::stable::accelerator::DeviceGuard guard(given.x->get_device_index());
    const ContiguousInputs inputs(given);
    const Tensor& x = *inputs.view().x;
    write_into(outs, x, output_shapes(Op::desc, x),
               [&](size_t i) { return outs[i].is_contiguous(); },
               [&](std::vector<Tensor>& ys) { forward_into<Op>(inputs.view(), attrs, ys); });
  }

  template <class Op>
  static Tensor backward(const Tensor& dy_in, const Tensor& x_in, const Attrs& attrs) {
    check_op_backward(Backend::CUDA, Op::desc, {dy_in}, Inputs{&x_in}, attrs);
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

// ---- the ops with a weight: dW is a sum over rows -----------------------------------------------

// The float32 workspace of a row op's backward: one partial dW row per row group, summed in a
// fixed order, so dW's bits are the same on every run.
Tensor dw_workspace(const Tensor& x, const k::RowView& s) {
  const auto partial_floats =
      static_cast<int64_t>(k::cuda::row_norm_backward_workspace_size(s.rows, s.cols) / sizeof(float));
  return torch::stable::new_empty(x, {partial_floats}, ScalarType::Float);
}

// The backward of a row op (kernels/ cuda_ops.cuh RowNormKernel, ResidualRowNormKernel), for its
// schema `<op>_backward(grads..., tensors..., attributes...)`: one float per attribute. dW in float32
// (the kernel writes all of it), then cast to W's dtype.
template <class Op, class At = std::make_index_sequence<Op::desc.nb_attrs>>
struct RowBackward;

template <class Op, size_t... At>
struct RowBackward<Op, std::index_sequence<At...>> {
  static std::tuple<Tensor, Tensor> row_norm(const Tensor& dy_in, const Tensor& x_in, const Tensor& w_in,
                                             Each<At, double>... attr_values) {
    const OpDesc& op = Op::desc;
    const Attrs attrs{attr_values...};
    check_op_backward(Backend::CUDA, op, {dy_in}, Inputs{&x_in, nullptr, &w_in}, attrs);
    torch::stable::accelerator::DeviceGuard guard(x_in.get_device_index());
    const Tensor x = torch::stable::contiguous(x_in);
    const Tensor w = torch::stable::contiguous(w_in);
    const Tensor dy = torch::stable::contiguous(dy_in);
    Tensor dx = torch::stable::new_empty(x, x.sizes());
    const k::RowView s = row_view(op, x);
    Tensor dw = torch::stable::new_empty(x, {s.cols}, ScalarType::Float);
    Tensor workspace = dw_workspace(x, s);
    const auto norm = Op::norm(kernel_attrs(op, attrs));
    if (s.cols > 0) dispatch(x.scalar_type(), [&](auto tag) {
      using T = decltype(tag);
      check_launch(op.name, with_weight<T>(w, [&](auto* wp) {
        return k::cuda::row_norm_backward<T>(in<T>(dy), in<T>(x), wp, out<T>(dx), out<float>(dw),
                                             workspace.mutable_data_ptr(), s.rows, s.cols, norm,
                                             launch_stream(op.name, x));
      }));
    });
    return {dx, torch::stable::to(dw, w.scalar_type())};
  }

  // dX and dR hold the same values but are two tensors: autograd may hand either to an in-place
  // consumer.
  static std::tuple<Tensor, Tensor, Tensor> residual_row_norm(const Tensor& dy_in, const Tensor& dh_in,
                                                              const Tensor& x_in, const Tensor& r_in,
                                                              const Tensor& w_in, Each<At, double>... attr_values) {
    const OpDesc& op = Op::desc;
    const Attrs attrs{attr_values...};
    check_op_backward(Backend::CUDA, op, {dy_in, dh_in}, Inputs{&x_in, &r_in, &w_in}, attrs);
    torch::stable::accelerator::DeviceGuard guard(x_in.get_device_index());
    const ContiguousInputs inputs(Inputs{&x_in, &r_in, &w_in});
    const Tensor &x = *inputs.view().x, &r = *inputs.view().r, &w = *inputs.view().w;
    const Tensor dy = torch::stable::contiguous(dy_in);
    const Tensor dh = torch::stable::contiguous(dh_in);
    Tensor dx = torch::stable::new_empty(x, x.sizes());
    Tensor dr = torch::stable::new_empty(x, x.sizes());
    const k::RowView s = row_view(op, x);
    Tensor dw = torch::stable::new_empty(x, {s.cols}, ScalarType::Float);
    Tensor workspace = dw_workspace(x, s);
    const auto norm = Op::norm(kernel_attrs(op, attrs));
    if (s.cols > 0) dispatch(x.scalar_type(), [&](auto tag) {
      using T = decltype(tag);
      check_launch(op.name, with_weight<T>(w, [&](auto* wp) {
        return k::cuda::residual_row_norm_backward<T>(in<T>(dy), in<T>(dh), in<T>(x), in<T>(r), wp, out<T>(dx),
                                                      out<T>(dr), out<float>(dw), workspace.mutable_data_ptr(),
                                                      s.rows, s.cols, norm, launch_stream(op.name, x));
      }));
    });
    return {dx, dr, torch::stable::to(dw, w.scalar_type())};
  }
};

}  // namespace
}  // namespace opforge_torch

STABLE_TORCH_LIBRARY_IMPL(opforge, CUDA, m) {
  using opforge_torch::Cuda;
#define OPFORGE_REGISTER_CUDA(Name) OPFORGE_TORCH_REGISTER(Cuda, opforge::kernels::cuda, Name)
  OPFORGE_FOR_EACH_OP(OPFORGE_REGISTER_CUDA)
#undef OPFORGE_REGISTER_CUDA
  // the row ops' backward (dW reduced over rows), every op of the two row families (ops_math_generated.h)
#define OPFORGE_REGISTER_ROW_NORM_BACKWARD(Name, name) \
  m.impl(#name "_backward", TORCH_BOX(&opforge_torch::RowBackward<opforge::kernels::cuda::Name##Kernel>::row_norm));
#define OPFORGE_REGISTER_RESIDUAL_ROW_NORM_BACKWARD(Name, name) \
  m.impl(#name "_backward",                                     \
         TORCH_BOX(&opforge_torch::RowBackward<opforge::kernels::cuda::Name##Kernel>::residual_row_norm));
  OPFORGE_FOR_EACH_ROW_NORM_OP(OPFORGE_REGISTER_ROW_NORM_BACKWARD)
  OPFORGE_FOR_EACH_RESIDUAL_ROW_NORM_OP(OPFORGE_REGISTER_RESIDUAL_ROW_NORM_BACKWARD)
#undef OPFORGE_REGISTER_ROW_NORM_BACKWARD
#undef OPFORGE_REGISTER_RESIDUAL_ROW_NORM_BACKWARD
}
