// Each op's CUDA launchers (cuda.cuh) behind one calling convention, the twin of cpu_ops.h: X is
// [rows, cols] (an elementwise op's row is one element) and one launch covers it all. The tensors
// an op does not have (R, W, H) are nullptr.
#pragma once

#include "opforge/kernels/attrs.h"
#include "opforge/kernels/cuda.cuh"
#include "opforge/kernels/functor.h"
#include "opforge/kernels/quant_rows_cuda.cuh"
#include "opforge/kernels/shapes.h"

namespace opforge::kernels::cuda {

template <class T>
struct Forward {
  const T* x;
  const T* w;  // the per-column weight, or nullptr
  T* y;
  int64_t rows;
  int64_t cols;
  AttrValues attrs;  // the op's attributes, in its descriptor's order
  const T* r = nullptr;  // the residual input, or nullptr
  T* h = nullptr;        // the second output, or nullptr
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
  int64_t rows;
  int64_t cols;
  AttrValues attrs;  // the op's attributes, in its descriptor's order
};

// The bindings of each launcher family (math.h: an op's functor <Name>Math; cuda.cuh: the family's
// launchers). ops_bindings_generated.h names every op's: `using <Name>Kernel = <Family>Kernel<...>`.
template <const OpDesc& Desc, template <class> class Math>
struct ElementwiseKernel {
  static constexpr const OpDesc& desc = Desc;
  using Fn = Math<Sigmoid>;
  template <class T>
  static cudaError_t forward(const Forward<T>& a, cudaStream_t s) {
    return elementwise_forward<T>(a.x, a.y, a.rows * a.cols, functor_of<Fn, Desc>(a.attrs), s);
  }
  template <class T>
  static cudaError_t backward(const Backward<T>& a, cudaStream_t s) {
    return elementwise_backward<T>(a.dy, a.x, a.dx, a.rows * a.cols, functor_of<Fn, Desc>(a.attrs), s);
  }
};

template <const OpDesc& Desc, template <class> class Math>
struct GatedKernel {
  static constexpr const OpDesc& desc = Desc;
  using Gate = Math<Sigmoid>;
  template <class T>
  static cudaError_t forward(const Forward<T>& a, cudaStream_t s) {
    return gated_forward<T>(a.x, a.y, a.rows, a.cols / 2, functor_of<Gate, Desc>(a.attrs), s);
  }
  template <class T>
  static cudaError_t backward(const Backward<T>& a, cudaStream_t s) {
    return gated_backward<T>(a.dy, a.x, a.dx, a.rows, a.cols / 2, functor_of<Gate, Desc>(a.attrs), s);
  }
};

// The weighted families' common part: the op's functor from its attributes (functor.h).
template <const OpDesc& Desc, class Math>
struct WeightedKernel {
  static constexpr const OpDesc& desc = Desc;
  using Norm = Math;
  static Norm norm(const AttrValues& attrs) { return functor_of<Norm, Desc>(attrs); }
};

// fn(w) with W as the call gives it: T, or float beside a 16-bit X (Forward::w_float32); fn's
// launch result.
template <class T, class Fn>
auto with_weight(const Forward<T>& a, Fn&& fn) {
  return a.w_float32 != nullptr ? fn(a.w_float32) : fn(a.w);
}

// backward: row_norm_backward with norm(attrs) (dW through a workspace the layer allocates).
template <const OpDesc& Desc, class Math>
struct RowNormKernel : WeightedKernel<Desc, Math> {
  using WeightedKernel<Desc, Math>::norm;
  template <class T>
  static cudaError_t forward(const Forward<T>& a, cudaStream_t s) {
    return with_weight(a, [&](auto w) { return row_norm_forward<T>(a.x, w, a.y, a.rows, a.cols, norm(a.attrs), s); });
  }
};

// backward: residual_row_norm_backward with norm(attrs).
template <const OpDesc& Desc, class Math>
struct ResidualRowNormKernel : WeightedKernel<Desc, Math> {
  using WeightedKernel<Desc, Math>::norm;
  template <class T>
  static cudaError_t forward(const Forward<T>& a, cudaStream_t s) {
    return with_weight(a, [&](auto w) {
      return residual_row_norm_forward<T>(a.x, a.r, w, a.y, a.h, a.rows, a.cols, norm(a.attrs), s);
    });
  }
};

// The quantized rows' families (quant_rows_cuda.cuh): Q, Scale (and H) from Forward::outputs, each
// of its own dtype.
template <const OpDesc& Desc, class Math>
struct RowNormQuantKernel : WeightedKernel<Desc, Math> {
  using WeightedKernel<Desc, Math>::norm;
  template <class T>
  static cudaError_t forward(const Forward<T>& a, cudaStream_t s) {
    float* scale = static_cast<float*>(a.outputs[1]);
    return with_weight(a, [&](auto w) {
      return row_norm_quant_forward<T>(a.x, w, a.outputs[0], scale, a.rows, a.cols, norm(a.attrs), s);
    });
  }
};

template <const OpDesc& Desc, class Math>
struct ResidualRowNormQuantKernel : WeightedKernel<Desc, Math> {
  using WeightedKernel<Desc, Math>::norm;
  template <class T>
  static cudaError_t forward(const Forward<T>& a, cudaStream_t s) {
    float* scale = static_cast<float*>(a.outputs[1]);
    T* h = static_cast<T*>(a.outputs[2]);
    return with_weight(a, [&](auto w) {
      return residual_row_norm_quant_forward<T>(a.x, a.r, w, a.outputs[0], scale, h, a.rows, a.cols, norm(a.attrs), s);
    });
  }
};

// SwishKernel, RMSNormKernel, ...: every op of a launcher family (generated from the spec).
#include "opforge/kernels/ops_bindings_generated.h"

// Every op's forward kernel, by descriptor: what a runtime plugin launches from untyped buffers.
// cudaErrorInvalidValue for an op without a CUDA kernel here.
template <class T, class... Kernels>
cudaError_t forward_of(const OpDesc& op, const Forward<T>& args, cudaStream_t s) {
  cudaError_t result = cudaErrorInvalidValue;
  ((&op == &Kernels::desc && (result = Kernels::forward(args, s), true)) || ...);
  return result;
}

// inputs: the op's op.nb_inputs tensors in its descriptor's order (X[, R][, W]); outputs: its
// op.nb_outputs (Y[, H]; Q, Scale[, H]), each of its own dtype. [rows, cols] is X's row view.
// weight_float32: W is float32 beside a 16-bit X (shapes.h weight_dtype_ok).
template <class T>
cudaError_t forward_by_desc(const OpDesc& op, const void* const* inputs, void* const* outputs, int64_t rows,
                            int64_t cols, const AttrValues& attrs, bool weight_float32, cudaStream_t s) {
  const auto input = [&](int i) { return static_cast<const T*>(inputs[i]); };
  const bool weight = has_weight(op);
  Forward<T> args{input(0), weight && !weight_float32 ? input(op.nb_inputs - 1) : nullptr,
                  static_cast<T*>(outputs[0]), rows, cols, attrs};
  if (weight && weight_float32) args.w_float32 = static_cast<const float*>(inputs[op.nb_inputs - 1]);
  if (has_residual(op)) args.r = input(1);
  if (op.nb_outputs > 1) args.h = static_cast<T*>(outputs[1]);
  args.outputs = outputs;
#define OPFORGE_CUDA_KERNEL(Name) , Name##Kernel
  return forward_of<T OPFORGE_FOR_EACH_OP(OPFORGE_CUDA_KERNEL)>(op, args, s);
#undef OPFORGE_CUDA_KERNEL
}

}  // namespace opforge::kernels::cuda
