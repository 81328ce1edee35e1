// Each op's CPU kernels (cpu.h) behind one calling convention, so a layer's glue is written once
// for every op: X is a RowView (shapes.h) and a call covers rows [r0, r1). An op added to the spec
// gets one binding here; the layers expand OPFORGE_FOR_EACH_OP. The tensors follow the op's
// descriptor (shapes.h has_residual / has_weight, nb_outputs): X, R (X's shape) and W in, Y and H
// (X's shape) out; the ones an op does not have are nullptr.
#pragma once

#include "opforge/kernels/cpu.h"
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
};

template <class T>
struct Backward {  // dX of an op whose only tensor input is X
  const T* dy;
  const T* x;
  T* dx;
  int64_t cols;
  AttrValues attrs;  // the op's attributes, in its descriptor's order
};

struct SwishKernel {
  static constexpr const OpDesc& desc = kSwishOp;
  template <class T>
  static void forward(const Forward<T>& a, int64_t r0, int64_t r1) {
    (a.stream_y ? swish_forward_streamed<T> : swish_forward<T>)(a.x + r0, a.y + r0, r1 - r0, a.attrs[0]);
  }
  template <class T>
  static void backward(const Backward<T>& a, int64_t r0, int64_t r1) {
    swish_backward<T>(a.dy + r0, a.x + r0, a.dx + r0, r1 - r0, a.attrs[0]);
  }
};

struct RMSNormKernel {
  static constexpr const OpDesc& desc = kRMSNormOp;
  template <class T>
  static void forward(const Forward<T>& a, int64_t r0, int64_t r1) {
    rms_norm_forward<T>(a.x, a.w, a.y, r0, r1, a.cols, a.attrs[0]);
  }
  // backward: dW is a reduction over rows; the layers schedule it themselves (rms_norm_backward).
};

struct SwiGLUKernel {
  static constexpr const OpDesc& desc = kSwiGLUOp;
  template <class T>
  static void forward(const Forward<T>& a, int64_t r0, int64_t r1) {
    gated_forward<T>(a.x, a.y, r0, r1, a.cols / 2, CpuGate<SwiGLUGate>{a.attrs[0]});
  }
  template <class T>
  static void backward(const Backward<T>& a, int64_t r0, int64_t r1) {
    gated_backward<T>(a.dy, a.x, a.dx, r0, r1, a.cols / 2, CpuGate<SwiGLUGate>{a.attrs[0]});
  }
};

struct GeGLUKernel {
  static constexpr const OpDesc& desc = kGeGLUOp;
  template <class T>
  static void forward(const Forward<T>& a, int64_t r0, int64_t r1) {
    gated_forward<T>(a.x, a.y, r0, r1, a.cols / 2, CpuGate<GeGLUGate>{});
  }
  template <class T>
  static void backward(const Backward<T>& a, int64_t r0, int64_t r1) {
    gated_backward<T>(a.dy, a.x, a.dx, r0, r1, a.cols / 2, CpuGate<GeGLUGate>{});
  }
};

struct AddRMSNormKernel {
  static constexpr const OpDesc& desc = kAddRMSNormOp;
  template <class T>
  static void forward(const Forward<T>& a, int64_t r0, int64_t r1) {
    add_rms_norm_forward<T>(a.x, a.r, a.w, a.y, a.h, r0, r1, a.cols, a.attrs[0]);
  }
  // backward: dW is a reduction over rows; the layers schedule it themselves (add_rms_norm_backward).
};

}  // namespace opforge::kernels::cpu
