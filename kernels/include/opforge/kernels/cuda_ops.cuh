// Each op's CUDA launchers (cuda.cuh) behind one calling convention, the twin of cpu_ops.h: X is
// [rows, cols] (an elementwise op's row is one element) and one launch covers it all. The tensors
// an op does not have (R, W, H) are nullptr.
#pragma once

#include "opforge/kernels/attrs.h"
#include "opforge/kernels/cuda.cuh"
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

struct SwishKernel {
  static constexpr const OpDesc& desc = kSwishOp;
  template <class T>
  static cudaError_t forward(const Forward<T>& a, cudaStream_t s) {
    return swish_forward<T>(a.x, a.y, a.rows * a.cols, a.attrs[0], s);
  }
  template <class T>
  static cudaError_t backward(const Backward<T>& a, cudaStream_t s) {
    return swish_backward<T>(a.dy, a.x, a.dx, a.rows * a.cols, a.attrs[0], s);
  }
};

struct RMSNormKernel {
  static constexpr const OpDesc& desc = kRMSNormOp;
  template <class T>
  static cudaError_t forward(const Forward<T>& a, cudaStream_t s) {
    return rms_norm_forward<T>(a.x, a.w, a.y, a.rows, a.cols, a.attrs[0], s);
  }
};

struct SwiGLUKernel {
  static constexpr const OpDesc& desc = kSwiGLUOp;
  template <class T>
  static cudaError_t forward(const Forward<T>& a, cudaStream_t s) {
    return gated_forward<T>(a.x, a.y, a.rows, a.cols / 2, SwiGLUGate<>{a.attrs[0]}, s);
  }
  template <class T>
  static cudaError_t backward(const Backward<T>& a, cudaStream_t s) {
    return gated_backward<T>(a.dy, a.x, a.dx, a.rows, a.cols / 2, SwiGLUGate<>{a.attrs[0]}, s);
  }
};

struct GeGLUKernel {
  static constexpr const OpDesc& desc = kGeGLUOp;
  template <class T>
  static cudaError_t forward(const Forward<T>& a, cudaStream_t s) {
    return gated_forward<T>(a.x, a.y, a.rows, a.cols / 2, GeGLUGate<>{}, s);
  }
  template <class T>
  static cudaError_t backward(const Backward<T>& a, cudaStream_t s) {
    return gated_backward<T>(a.dy, a.x, a.dx, a.rows, a.cols / 2, GeGLUGate<>{}, s);
  }
};

struct AddRMSNormKernel {
  static constexpr const OpDesc& desc = kAddRMSNormOp;
  template <class T>
  static cudaError_t forward(const Forward<T>& a, cudaStream_t s) {
    return add_rms_norm_forward<T>(a.x, a.r, a.w, a.y, a.h, a.rows, a.cols, a.attrs[0], s);
  }
};

// Every op's forward kernel, by descriptor: what a runtime plugin launches from untyped buffers.
// cudaErrorInvalidValue for an op without a CUDA kernel here.
template <class T, class... Kernels>
cudaError_t forward_of(const OpDesc& op, const Forward<T>& args, cudaStream_t s) {
  cudaError_t result = cudaErrorInvalidValue;
  ((&op == &Kernels::desc && (result = Kernels::forward(args, s), true)) || ...);
  return result;
}

// inputs: the op's op.nb_inputs tensors in its descriptor's order (X[, R][, W]); outputs: its
// op.nb_outputs (Y[, H]). [rows, cols] is X's row view.
template <class T>
cudaError_t forward_by_desc(const OpDesc& op, const void* const* inputs, void* const* outputs, int64_t rows,
                            int64_t cols, const AttrValues& attrs, cudaStream_t s) {
  const auto input = [&](int i) { return static_cast<const T*>(inputs[i]); };
  Forward<T> args{input(0), has_weight(op) ? input(op.nb_inputs - 1) : nullptr, static_cast<T*>(outputs[0]),
                  rows, cols, attrs};
  if (has_residual(op)) args.r = input(1);
  if (op.nb_outputs > 1) args.h = static_cast<T*>(outputs[1]);
#define OPFORGE_CUDA_KERNEL(Name) , Name##Kernel
  return forward_of<T OPFORGE_FOR_EACH_OP(OPFORGE_CUDA_KERNEL)>(op, args, s);
#undef OPFORGE_CUDA_KERNEL
}

}  // namespace opforge::kernels::cuda
