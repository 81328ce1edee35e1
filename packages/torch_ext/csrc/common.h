// Shared by the CPU and CUDA translation units: LibTorch stable-ABI includes, argument checks
// with the canonical opforge error text, and small helpers. Only torch/csrc/stable and
// torch/headeronly are used, so the binary serves every torch from TORCH_TARGET_VERSION on.
#pragma once

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include <opforge/kernels/shapes.h>

#include <array>
#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace opforge_torch {

using torch::headeronly::ScalarType;
using torch::stable::Tensor;

enum class Backend { CPU, CUDA };

using opforge::kernels::OpDesc;

// An op's attributes as the schema hands them over (doubles, in the descriptor's order).
using Attrs = std::array<double, opforge::kernels::kMaxAttrs>;

// The values the kernels compute with (float32; the checks ran first, so each cast is defined).
opforge::kernels::AttrValues kernel_attrs(const OpDesc& op, const Attrs& attrs);

// `opforge.<Op>: <what>: expected <expected>, got <got>` thrown as std::runtime_error,
// which torch surfaces as RuntimeError.
[[noreturn]] void fail(const char* op, const std::string& what, const std::string& expected,
                       const std::string& got);

// An op's tensor inputs as its descriptor orders them (shapes.h): X, then a residual R of X's
// shape, then a per-column weight W; those the op does not have are nullptr.
struct Inputs {
  const Tensor* x = nullptr;
  const Tensor* r = nullptr;
  const Tensor* w = nullptr;
};
Inputs inputs_of(const OpDesc& op, const Tensor* const* tensors);
// Whether W's dtype is not X's: once checked (shapes.h weight_dtype_ok), a float32 W with a 16-bit X.
inline bool mixed_weight(const Inputs& in) { return in.w != nullptr && in.w->scalar_type() != in.x->scalar_type(); }

// The inputs made contiguous (a contiguous one is used as is, so an `out` that is an input stays
// that input); kept alive as long as this object.
class ContiguousInputs {
 public:
  explicit ContiguousInputs(const Inputs& in);
  Inputs view() const;

 private:
  Tensor x_, r_, w_;
  bool has_r_, has_w_;
};

// An op's argument checks, from its descriptor: devices, dtypes, X's shape rule, R and W (when
// the op has them), the attributes. The backward adds one gradient per output (dY, dH: each
// output's shape).
void check_op(Backend backend, const OpDesc& op, const Inputs& in, const Attrs& attrs);
void check_op_backward(Backend backend, const OpDesc& op, const std::vector<Tensor>& grads,
                       const Inputs& in, const Attrs& attrs);
// The outputs of an .out overload (out, or y_out and h_out): X's device and dtype, each output's
// shape, no memory shared with an input unless the output is that input itself and the op's
// descriptor lets it write over that input (may_overwrite: each row is read before it is written
// over), and none shared between two outputs.
// Each output's dtype is its own (OutputDesc: X's, fixed, or picked by an enum attribute).
void check_outs(const OpDesc& op, const std::vector<Tensor>& outs, const Inputs& in, const Attrs& attrs);

std::vector<int64_t> shape_of(const Tensor& t);
// Each output's shape by its rule (OutputDesc: the op's rule, X's, or X's with the last dim 1).
std::vector<std::vector<int64_t>> output_shapes(const OpDesc& op, const Tensor& x);
// Each output's dtype for the call's attributes.
std::vector<ScalarType> output_dtypes(const OpDesc& op, const Tensor& x, const Attrs& attrs);
opforge::kernels::RowView row_view(const OpDesc& op, const Tensor& x);
// Whether two tensors' elements share any byte.
bool overlaps(const Tensor& a, const Tensor& b);

std::vector<Tensor> new_outputs(const OpDesc& op, const Tensor& x, const Attrs& attrs);

// Runs `compute(ys)` on contiguous ys so that `outs` hold the results: ys[i] is outs[i] itself
// when `direct(i)`, else a temporary of shapes[i] copied into outs[i] afterwards.
template <class Direct, class Compute>
void write_into(const std::vector<Tensor>& outs, const Tensor& like,
                const std::vector<std::vector<int64_t>>& shapes, Direct&& direct, Compute&& compute) {
  std::vector<Tensor> ys;
  std::vector<bool> in_place;
  for (size_t i = 0; i < outs.size(); ++i) {
    in_place.push_back(direct(i));
    ys.push_back(in_place[i] ? outs[i] : torch::stable::new_empty(like, shapes[i], outs[i].scalar_type()));
  }
  compute(ys);
  for (size_t i = 0; i < outs.size(); ++i) {
    if (in_place[i]) continue;
    Tensor target = outs[i];
    torch::stable::copy_(target, ys[i]);
  }
}

// ---- registration: one line per op and backend ----------------------------------------------
// `Impl` is a backend's glue (static templates forward<Op>(Inputs, Attrs) -> outputs,
// forward_out<Op>(Inputs, Attrs, outputs) and, for single-input ops, backward<Op>(dY, X, Attrs));
// `Op` an op's kernel binding (kernels/ cpu_ops.h, cuda_ops.cuh). Entry adapts them to the
// schemas' signatures (schema_generated.h), by the descriptor: its tensor inputs, one float per
// attribute, one Tensor (or a tuple of them) per output; an .out overload takes one `out` per
// output after the attributes, writes them and returns nothing.

// Each<I, T> is T, one per element of a pack of indices (through a struct: nvcc's front end drops
// the pack from an alias that does not use its index).
template <size_t, class T>
struct EachOf {
  using type = T;
};
template <size_t I, class T>
using Each = typename EachOf<I, T>::type;

// The schemas' type of attribute I of Op: double for a float attribute, int64_t for an int or enum one.
template <class Op, size_t I>
struct AttrArgOf {
  using type = std::conditional_t<Op::desc.attrs[I]->type == opforge::kernels::AttrType::kFloat, double, int64_t>;
};
template <class Op, size_t I>
using AttrArg = typename AttrArgOf<Op, I>::type;

template <class Impl, class Op, class In = std::make_index_sequence<Op::desc.nb_inputs>,
          class At = std::make_index_sequence<Op::desc.nb_attrs>,
          class Out = std::make_index_sequence<Op::desc.nb_outputs>>
struct Entry;

template <class Impl, class Op, size_t... In, size_t... At, size_t... Out>
struct Entry<Impl, Op, std::index_sequence<In...>, std::index_sequence<At...>, std::index_sequence<Out...>> {
  using Result = std::conditional_t<sizeof...(Out) == 1, Tensor, std::tuple<Each<Out, Tensor>...>>;

  static Result forward(Each<In, const Tensor&>... inputs, AttrArg<Op, At>... attrs) {
    const Tensor* tensors[] = {&inputs...};
    std::vector<Tensor> outs = Impl::template forward<Op>(inputs_of(Op::desc, tensors), Attrs{static_cast<double>(attrs)...});
    if constexpr (sizeof...(Out) == 1) {
      return outs[0];
    } else {
      return Result{outs[Out]...};
    }
  }
  static void forward_out(Each<In, const Tensor&>... inputs, AttrArg<Op, At>... attrs,
                          Each<Out, Tensor>... outs) {
    const Tensor* tensors[] = {&inputs...};
    Impl::template forward_out<Op>(inputs_of(Op::desc, tensors), Attrs{static_cast<double>(attrs)...}, std::vector<Tensor>{outs...});
  }
  static Tensor backward(const Tensor& dy, const Tensor& x, AttrArg<Op, At>... attrs) {
    return Impl::template backward<Op>(dy, x, Attrs{static_cast<double>(attrs)...});
  }
};

using Library = torch::stable::detail::StableLibrary;

// <op> and <op>.out of every op; <op>_backward of a single-input op with a gradient (an op with a
// weight reduces dW over rows: its backward is the backend's own; an op without a gradient has none).
template <class Impl, class Op>
void register_op(Library& m) {
  using E = Entry<Impl, Op>;
  const std::string name = Op::desc.torch_name;
  m.impl(name.c_str(), TORCH_BOX((&E::forward)));
  m.impl((name + ".out").c_str(), TORCH_BOX((&E::forward_out)));
  if constexpr (Op::desc.nb_inputs == 1 && Op::desc.has_gradient) m.impl((name + "_backward").c_str(), TORCH_BOX((&E::backward)));
}

}  // namespace opforge_torch

// Every op of the spec (ops_generated.h), for a backend's STABLE_TORCH_LIBRARY_IMPL block.
#define OPFORGE_TORCH_REGISTER(Impl, Namespace, Name) opforge_torch::register_op<Impl, Namespace::Name##Kernel>(m);
