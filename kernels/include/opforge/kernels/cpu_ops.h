// Each op's CPU kernels (cpu.h) behind one calling convention, so a layer's glue is written once
// for every op: X is a RowView (shapes.h) and a call covers rows [r0, r1). An op added to the spec
// gets one binding here (generated for an op of a launcher family); the layers expand OPFORGE_FOR_EACH_OP. The tensors follow the op's
// descriptor (shapes.h has_residual / has_weight, nb_outputs): X, R (X's shape) and W in, Y and H
// (X's shape) out; the ones an op does not have are nullptr.
#pragma once

#include <type_traits>

#include "opforge/kernels/cpu.h"
#include "opforge/kernels/functor.h"
#include "opforge/kernels/quant_rows_cpu.h"
#include "opforge/kernels/shapes.h"

namespace opforge::kernels::cpu {

template <class T>
struct Forward {
  const T* x;
  const T* w;  // the per-column weight, or nullptr
  T* y;
  int64_t cols;
  AttrValues attrs;  // the op's attributes, in its descriptor's order
  bool stream_y = false;  // Y is a large, reused buffer: non-temporal stores (Swish; cpu.h)
  const T* r = nullptr;   // the residual input, or nullptr
  T* h = nullptr;         // the second output, or nullptr
  // Every output in descriptor order, each of its own dtype (OutputDesc; an op whose outputs are
  // not all T reads them here), or nullptr.
  void* const* outputs = nullptr;
  // W in float32 with a 16-bit X (shapes.h weight_dtype_ok; then w is nullptr): the row norms
  // read it as given.
  const float* w_float32 = nullptr;
};

template <class T>
struct Backward {  // dX of an op whose only tensor input is X
  const T* dy;
  const T* x;
  T* dx;
  int64_t cols;
  AttrValues attrs;  // the op's attributes, in its descriptor's order
};

// The bindings of each launcher family (math.h: an op's functor <Name>Math; cpu.h: the family's
// launchers). ops_bindings_generated.h names every op's: `using <Name>Kernel = <Family>Kernel<...>`.
template <const OpDesc& Desc, template <class> class Math>
struct ElementwiseKernel {
  static constexpr const OpDesc& desc = Desc;
  using Fn = CpuMath<Math>;
  template <class T>
  static void forward(const Forward<T>& a, int64_t r0, int64_t r1) {
    const Fn fn = functor_of<Fn, Desc>(a.attrs);
    (a.stream_y ? elementwise_forward_streamed<T, Fn> : elementwise_forward<T, Fn>)(a.x + r0, a.y + r0, r1 - r0, fn);
  }
  template <class T>
  static void backward(const Backward<T>& a, int64_t r0, int64_t r1) {
    elementwise_backward<T, Fn>(a.dy + r0, a.x + r0, a.dx + r0, r1 - r0, functor_of<Fn, Desc>(a.attrs));
  }
};

template <const OpDesc& Desc, template <class> class Math>
struct GatedKernel {
  static constexpr const OpDesc& desc = Desc;
  using Gate = CpuMath<Math>;
  template <class T>
  static void forward(const Forward<T>& a, int64_t r0, int64_t r1) {
    gated_forward<T>(a.x, a.y, r0, r1, a.cols / 2, functor_of<Gate, Desc>(a.attrs));
  }
  template <class T>
  static void backward(const Backward<T>& a, int64_t r0, int64_t r1) {
    gated_backward<T>(a.dy, a.x, a.dx, r0, r1, a.cols / 2, functor_of<Gate, Desc>(a.attrs));
  }
};

// The weighted families' common part: the op's functor from its attributes (functor.h).
template <const OpDesc& Desc, class Math>
struct WeightedKernel {
  static constexpr const OpDesc& desc = Desc;
  using Norm = Math;
  static Norm norm(const AttrValues& attrs) { return functor_of<Norm, Desc>(attrs); }
};

// fn(w) with W as the call gives it: T, or float beside a bfloat16 X (Forward::w_float32).
template <class T, class Fn>
void with_weight(const Forward<T>& a, Fn&& fn) {
  if constexpr (std::is_same_v<T, bfloat16>) {
    if (a.w_float32 != nullptr) return fn(a.w_float32);
  }
  fn(a.w);
}

// backward: dW is a reduction over rows; the layers schedule it themselves (row_norm_backward with
// the op's functor, norm(attrs)).
template <const OpDesc& Desc, class Math>
struct RowNormKernel : WeightedKernel<Desc, Math> {
  using WeightedKernel<Desc, Math>::norm;
  template <class T>
  static void forward(const Forward<T>& a, int64_t r0, int64_t r1) {
    with_weight(a, [&](auto w) { row_norm_forward<T>(a.x, w, a.y, r0, r1, a.cols, norm(a.attrs)); });
  }
};

// backward: as RowNormKernel's (residual_row_norm_backward).
template <const OpDesc& Desc, class Math>
struct ResidualRowNormKernel : WeightedKernel<Desc, Math> {
  using WeightedKernel<Desc, Math>::norm;
  template <class T>
  static void forward(const Forward<T>& a, int64_t r0, int64_t r1) {
    with_weight(a, [&](auto w) {
      residual_row_norm_forward<T>(a.x, a.r, w, a.y, a.h, r0, r1, a.cols, norm(a.attrs));
    });
  }
};

// The quantized rows' families (quant_rows_cpu.h): Q, Scale (and H) from Forward::outputs, each of
// its own dtype.
template <const OpDesc& Desc, class Math>
struct RowNormQuantKernel : WeightedKernel<Desc, Math> {
  using WeightedKernel<Desc, Math>::norm;
  template <class T>
  static void forward(const Forward<T>& a, int64_t r0, int64_t r1) {
    float* scale = static_cast<float*>(a.outputs[1]);
    with_weight(a, [&](auto w) {
      row_norm_quant_forward<T>(a.x, w, a.outputs[0], scale, r0, r1, a.cols, norm(a.attrs));
    });
  }
};

template <const OpDesc& Desc, class Math>
struct ResidualRowNormQuantKernel : WeightedKernel<Desc, Math> {
  using WeightedKernel<Desc, Math>::norm;
  template <class T>
  static void forward(const Forward<T>& a, int64_t r0, int64_t r1) {
    float* scale = static_cast<float*>(a.outputs[1]);
    T* h = static_cast<T*>(a.outputs[2]);
    with_weight(a, [&](auto w) {
      residual_row_norm_quant_forward<T>(a.x, a.r, w, a.outputs[0], scale, h, r0, r1, a.cols, norm(a.attrs));
    });
  }
};

// SwishKernel, RMSNormKernel, ...: every op of a launcher family (generated from the spec).
#include "opforge/kernels/ops_bindings_generated.h"

}  // namespace opforge::kernels::cpu
