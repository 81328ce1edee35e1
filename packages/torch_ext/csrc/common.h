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

// An op's argument checks, from its descriptor: devices, dtypes, X's shape rule, W (when given),
// the attributes. The backward adds dY (Y's shape).
void check_op(Backend backend, const OpDesc& op, const Tensor& x, const Tensor* w, const Attrs& attrs);
void check_op_backward(Backend backend, const OpDesc& op, const Tensor& dy, const Tensor& x,
                       const Tensor* w, const Attrs& attrs);
// `out` of an .out overload: X's device and dtype, the output's shape, and no memory shared with
// X or W unless `out` is that input itself (each element is read before it is written over).
void check_out(const OpDesc& op, const Tensor& out, const Tensor& x, const Tensor* w);

std::vector<int64_t> shape_of(const Tensor& t);
std::vector<int64_t> output_shape(const OpDesc& op, const Tensor& x);
opforge::kernels::RowView row_view(const OpDesc& op, const Tensor& x);

// Runs `compute(y)` on a contiguous y so that `out` holds the result: y is `out` itself when it
// is contiguous, else a temporary copied into it.
template <class Compute>
void write_into(Tensor out, const Tensor& like, const std::vector<int64_t>& shape,
                Compute&& compute) {
  if (out.is_contiguous()) {
    compute(out);
    return;
  }
  Tensor y = torch::stable::new_empty(like, shape);
  compute(y);
  torch::stable::copy_(out, y);
}

// ---- registration: one line per op and backend ----------------------------------------------
// `Impl` is a backend's glue (static templates forward<Op>, forward_out<Op>, backward<Op> taking
// W as a pointer, nullptr for single-input ops, and the attributes as Attrs); `Op` an op's kernel
// binding (kernels/ cpu_ops.h, cuda_ops.cuh). These adapt them to the schemas' signatures
// (schema_generated.h: one float per attribute): an .out overload writes `out` and returns nothing.
template <size_t, class T>
using Each = T;

template <class Impl, class Op, class Indices = std::make_index_sequence<Op::desc.nb_attrs>>
struct Entry;

template <class Impl, class Op, size_t... I>
struct Entry<Impl, Op, std::index_sequence<I...>> {
  static Tensor unary(const Tensor& x, Each<I, double>... attrs) {
    return Impl::template forward<Op>(x, nullptr, Attrs{attrs...});
  }
  static void unary_out(const Tensor& x, Each<I, double>... attrs, Tensor out) {
    Impl::template forward_out<Op>(x, nullptr, Attrs{attrs...}, out);
  }
  static Tensor weighted(const Tensor& x, const Tensor& w, Each<I, double>... attrs) {
    return Impl::template forward<Op>(x, &w, Attrs{attrs...});
  }
  static void weighted_out(const Tensor& x, const Tensor& w, Each<I, double>... attrs, Tensor out) {
    Impl::template forward_out<Op>(x, &w, Attrs{attrs...}, out);
  }
  static Tensor unary_backward(const Tensor& dy, const Tensor& x, Each<I, double>... attrs) {
    return Impl::template backward<Op>(dy, x, Attrs{attrs...});
  }
};

using Library = torch::stable::detail::StableLibrary;

// <op>, <op>.out and <op>_backward of a single-input op.
template <class Impl, class Op>
void register_unary(Library& m) {
  using E = Entry<Impl, Op>;
  const std::string name = Op::desc.torch_name;
  m.impl(name.c_str(), TORCH_BOX((&E::unary)));
  m.impl((name + ".out").c_str(), TORCH_BOX((&E::unary_out)));
  m.impl((name + "_backward").c_str(), TORCH_BOX((&E::unary_backward)));
}

// <op> and <op>.out of an op with a weight W; its backward (dW) is the backend's own.
template <class Impl, class Op>
void register_weighted(Library& m) {
  using E = Entry<Impl, Op>;
  const std::string name = Op::desc.torch_name;
  m.impl(name.c_str(), TORCH_BOX((&E::weighted)));
  m.impl((name + ".out").c_str(), TORCH_BOX((&E::weighted_out)));
}

// An op's registrations by its descriptor's inputs: X alone, or X and a weight W.
template <class Impl, class Op>
void register_op(Library& m) {
  if constexpr (Op::desc.nb_inputs == 1) {
    register_unary<Impl, Op>(m);
  } else {
    register_weighted<Impl, Op>(m);
  }
}

}  // namespace opforge_torch

// Every op of the spec (ops_generated.h), for a backend's STABLE_TORCH_LIBRARY_IMPL block.
#define OPFORGE_TORCH_REGISTER(Impl, Namespace, Name) opforge_torch::register_op<Impl, Namespace::Name##Kernel>(m);
