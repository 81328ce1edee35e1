// CPU kernels: validation, contiguity and threading here; the math is kernels/ cpu.h.
#include <opforge/kernels/cpu_ops.h>

#include <algorithm>
#include <type_traits>

#include "common.h"

namespace opforge_torch {
namespace {

namespace k = opforge::kernels;

// ~32K elements per task: below that the thread hand-off costs more than the work.
constexpr int64_t kGrainElements = 32768;
// Upper bound on dW partial sums: fixed per shape, so the result does not depend on thread count.
constexpr int64_t kMaxRowBlocks = 64;

// Calls fn(T{}) with the kernel element type matching `t` (checks ran before).
template <class Fn>
void dispatch(ScalarType t, Fn&& fn) {
  switch (t) {
    case ScalarType::Float: return fn(float{});
    case ScalarType::Double: return fn(double{});
    case ScalarType::BFloat16: return fn(opforge::kernels::bfloat16{});
    default: fail("kernel", "dtype", "a checked dtype", torch::headeronly::toString(t));
  }
}

template <class T>
const T* in(const Tensor& t) { return static_cast<const T*>(t.const_data_ptr()); }
template <class T>
T* out(const Tensor& t) { return static_cast<T*>(t.mutable_data_ptr()); }

// Calls fn(w) with W's pointer as the kernels take it: float32 with a bfloat16 X (a mixed-dtype
// call, checked: shapes.h weight_dtype_ok), else X's type.
template <class T, class Fn>
void with_weight(const Tensor& w, Fn&& fn) {
  if constexpr (std::is_same_v<T, opforge::kernels::bfloat16>) {
    if (w.scalar_type() == ScalarType::Float) return fn(in<float>(w));
  }
  fn(in<T>(w));
}

int64_t row_grain(int64_t cols) { return std::max<int64_t>(1, kGrainElements / std::max<int64_t>(cols, 1)); }

// ---- every op: forward, .out and (single-input ops) backward, from the op's kernel binding ----

// in: contiguous; ys: contiguous, the outputs' shapes. reused_y: ys[0] is the caller's buffer (an
// `out=`), not one just allocated, so a large one is written with non-temporal stores (kernels/
// cpu.h).
template <class Op>
void forward_into(const Inputs& src, const Attrs& attrs, std::vector<Tensor>& ys, bool reused_y = false) {
  const k::RowView v = row_view(Op::desc, *src.x);
  dispatch(src.x->scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    const bool stream = reused_y && k::cpu::streaming_pays_off(ys[0].numel() * int64_t(sizeof(T)));
    k::cpu::Forward<T> args{in<T>(*src.x), nullptr, out<T>(ys[0]), v.cols, kernel_attrs(Op::desc, attrs), stream};
    if (mixed_weight(src)) args.w_float32 = in<float>(*src.w);
    else if (src.w != nullptr) args.w = in<T>(*src.w);
    if (src.r != nullptr) args.r = in<T>(*src.r);
    if (ys.size() > 1) args.h = out<T>(ys[1]);
    void* outputs[k::kMaxOutputs] = {};  // ys.size() <= kMaxOutputs: attrs.h checks every op
    for (size_t i = 0; i < ys.size(); ++i) outputs[i] = ys[i].mutable_data_ptr();
    args.outputs = outputs;
    torch::stable::parallel_for(0, v.rows, row_grain(v.cols), [&](int64_t b, int64_t e) {
      Op::forward(args, b, e);
    });
  });
}

struct Cpu {
  template <class Op>
  static std::vector<Tensor> forward(const Inputs& given, const Attrs& attrs) {
    check_op(Backend::CPU, Op::desc, given, attrs);
    const ContiguousInputs inputs(given);
    std::vector<Tensor> ys = new_outputs(Op::desc, *inputs.view().x, attrs);
    forward_into<Op>(inputs.view(), attrs, ys);
    return ys;
  }

  // Each row's inputs are read before its outputs are written (cpu.h), so an output may be the
  // input it replaces (h_out the residual, y_out X itself).
  template <class Op>
  static void forward_out(const Inputs& given, const Attrs& attrs, const std::vector<Tensor>& outs) {
    check_op(Backend::CPU, Op::desc, given, attrs);
    check_outs(Op::desc, outs, given, attrs);
    const ContiguousInputs inputs(given);
    const Tensor& x = *inputs.view().x;
    write_into(outs, x, output_shapes(Op::desc, x), [&](size_t i) { return outs[i].is_contiguous(); },
               [&](std::vector<Tensor>& ys) {
                 forward_into<Op>(inputs.view(), attrs, ys, /*reused_y=*/ys[0].const_data_ptr() == outs[0].const_data_ptr());
               });
  }

  template <class Op>
  static Tensor backward(const Tensor& dy_in, const Tensor& x_in, const Attrs& attrs) {
    check_op_backward(Backend::CPU, Op::desc, {dy_in}, Inputs{&x_in}, attrs);
    const Tensor x = torch::stable::contiguous(x_in);
    const Tensor dy = torch::stable::contiguous(dy_in);
    Tensor dx = torch::stable::new_empty(x, x.sizes());
    const k::RowView v = row_view(Op::desc, x);
    dispatch(x.scalar_type(), [&](auto tag) {
      using T = decltype(tag);
      const k::cpu::Backward<T> args{in<T>(dy), in<T>(x), out<T>(dx), v.cols, kernel_attrs(Op::desc, attrs)};
      torch::stable::parallel_for(0, v.rows, row_grain(v.cols), [&](int64_t b, int64_t e) {
        Op::backward(args, b, e);
      });
    });
    return dx;
  }
};

// ---- the ops with a weight: dW is a sum over rows -----------------------------------------------

// dW of a row op: rows_into(T{}, partial, r0, r1) computes the gradients of rows [r0, r1) and adds
// their dW into `partial` (a row of float, double for double). The row blocks are fixed per shape
// and reduced by torch::stable::sum, so dW does not depend on the thread count.
template <class Rows>
Tensor weight_grad(const Tensor& x, const Tensor& w, const k::RowView& s, Rows&& rows_into) {
  const ScalarType acc_type = x.scalar_type() == ScalarType::Double ? ScalarType::Double : ScalarType::Float;
  const int64_t blocks = std::clamp<int64_t>(s.rows * s.cols / kGrainElements, 1, kMaxRowBlocks);
  const int64_t rows_per_block = s.rows == 0 ? 0 : (s.rows + blocks - 1) / blocks;
  Tensor partial = torch::stable::new_zeros(x, {blocks, s.cols}, acc_type);
  dispatch(x.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
    Acc* acc = out<Acc>(partial);
    torch::stable::parallel_for(0, blocks, 1, [&](int64_t b, int64_t e) {
      for (int64_t blk = b; blk < e; ++blk) {
        const int64_t r0 = std::min(s.rows, blk * rows_per_block);
        const int64_t r1 = std::min(s.rows, r0 + rows_per_block);
        rows_into(tag, acc + blk * s.cols, r0, r1);
      }
    });
  });
  const int64_t reduce_dims[] = {0};
  Tensor dw = torch::stable::sum(partial, torch::headeronly::IntHeaderOnlyArrayRef(reduce_dims, 1));
  return torch::stable::to(dw, w.scalar_type());
}

// The backward of a row op (kernels/ cpu_ops.h RowNormKernel, ResidualRowNormKernel), for its schema
// `<op>_backward(grads..., tensors..., attributes...)`: one float per attribute of the descriptor.
template <class Op, class At = std::make_index_sequence<Op::desc.nb_attrs>>
struct RowBackward;

template <class Op, size_t... At>
struct RowBackward<Op, std::index_sequence<At...>> {
  static std::tuple<Tensor, Tensor> row_norm(const Tensor& dy_in, const Tensor& x_in, const Tensor& w_in,
                                             Each<At, double>... attr_values) {
    const OpDesc& op = Op::desc;
    const Attrs attrs{attr_values...};
    check_op_backward(Backend::CPU, op, {dy_in}, Inputs{&x_in, nullptr, &w_in}, attrs);
    const Tensor x = torch::stable::contiguous(x_in);
    const Tensor w = torch::stable::contiguous(w_in);
    const Tensor dy = torch::stable::contiguous(dy_in);
    Tensor dx = torch::stable::new_empty(x, x.sizes());
    const k::RowView s = row_view(op, x);
    const auto norm = Op::norm(kernel_attrs(op, attrs));
    Tensor dw = weight_grad(x, w, s, [&](auto tag, auto* acc, int64_t r0, int64_t r1) {
      using T = decltype(tag);
      with_weight<T>(w, [&](auto* wp) {
        k::cpu::row_norm_backward<T>(in<T>(dy), in<T>(x), wp, out<T>(dx), acc, r0, r1, s.cols, norm);
      });
    });
    return {dx, dw};
  }

  // dX and dR hold the same values but are two tensors: autograd may hand either to an in-place
  // consumer. The kernel keeps H in dR's row until it has read it.
  static std::tuple<Tensor, Tensor, Tensor> residual_row_norm(const Tensor& dy_in, const Tensor& dh_in,
                                                              const Tensor& x_in, const Tensor& r_in,
                                                              const Tensor& w_in, Each<At, double>... attr_values) {
    const OpDesc& op = Op::desc;
    const Attrs attrs{attr_values...};
    check_op_backward(Backend::CPU, op, {dy_in, dh_in}, Inputs{&x_in, &r_in, &w_in}, attrs);
    const ContiguousInputs inputs(Inputs{&x_in, &r_in, &w_in});
    const Tensor &x = *inputs.view().x, &r = *inputs.view().r, &w = *inputs.view().w;
    const Tensor dy = torch::stable::contiguous(dy_in);
    const Tensor dh = torch::stable::contiguous(dh_in);
    Tensor dx = torch::stable::new_empty(x, x.sizes());
    Tensor dr = torch::stable::new_empty(x, x.sizes());
    const k::RowView s = row_view(op, x);
    const auto norm = Op::norm(kernel_attrs(op, attrs));
    Tensor dw = weight_grad(x, w, s, [&](auto tag, auto* acc, int64_t r0, int64_t r1) {
      using T = decltype(tag);
      with_weight<T>(w, [&](auto* wp) {
        k::cpu::residual_row_norm_backward<T>(in<T>(dy), in<T>(dh), in<T>(x), in<T>(r), wp, out<T>(dx),
                                              out<T>(dr), acc, r0, r1, s.cols, norm);
      });
    });
    return {dx, dr, dw};
  }
};

}  // namespace
}  // namespace opforge_torch

STABLE_TORCH_LIBRARY_IMPL(opforge, CPU, m) {
  using opforge_torch::Cpu;
#define OPFORGE_REGISTER_CPU(Name) OPFORGE_TORCH_REGISTER(Cpu, opforge::kernels::cpu, Name)
  OPFORGE_FOR_EACH_OP(OPFORGE_REGISTER_CPU)
#undef OPFORGE_REGISTER_CPU
  // the row ops' backward (dW reduced over rows), every op of the two row families (ops_math_generated.h)
#define OPFORGE_REGISTER_ROW_NORM_BACKWARD(Name, name) \
  m.impl(#name "_backward", TORCH_BOX(&opforge_torch::RowBackward<opforge::kernels::cpu::Name##Kernel>::row_norm));
#define OPFORGE_REGISTER_RESIDUAL_ROW_NORM_BACKWARD(Name, name) \
  m.impl(#name "_backward",                                     \
         TORCH_BOX(&opforge_torch::RowBackward<opforge::kernels::cpu::Name##Kernel>::residual_row_norm));
  OPFORGE_FOR_EACH_ROW_NORM_OP(OPFORGE_REGISTER_ROW_NORM_BACKWARD)
  OPFORGE_FOR_EACH_RESIDUAL_ROW_NORM_OP(OPFORGE_REGISTER_RESIDUAL_ROW_NORM_BACKWARD)
#undef OPFORGE_REGISTER_ROW_NORM_BACKWARD
#undef OPFORGE_REGISTER_RESIDUAL_ROW_NORM_BACKWARD
}
