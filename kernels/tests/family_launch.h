// Every op of a launcher family on the shared CUDA launchers (cuda.cuh), by its index in kOps (spec
// order, as cuda_harness.py numbers them): what the GPU shim (gpu/gpu_shim.cu) and the CPU
// emulation of the kernels (cuda_emulation.cc) run. The ops of each family come from the spec
// (ops_math_generated.h: OPFORGE_FOR_EACH_<FAMILY>_OP), so an op of a known shape needs no entry.
#pragma once

#include "opforge/kernels/cuda.cuh"
#include "opforge/kernels/functor.h"
#include "opforge/kernels/quant_rows_cuda.cuh"
#include "opforge/kernels/shapes.h"

namespace opforge_test {

namespace k = opforge::kernels;
namespace kc = opforge::kernels::cuda;

constexpr int kOpCount = int(sizeof k::kOps / sizeof k::kOps[0]);

inline const k::OpDesc& op_of(int op) { return *k::kOps[op < 0 || op >= kOpCount ? 0 : op]; }
inline bool valid_op(int op) { return op >= 0 && op < kOpCount; }
inline bool is_weighted(int op) { return k::has_weight(op_of(op)); }       // W [cols]; dW backward
inline bool is_gated(int op) { return op_of(op).split > 1; }               // Y [rows, cols / split]
inline bool is_residual(int op) { return k::has_residual(op_of(op)); }     // R in, H out; dH, dR backward

// The op's attributes as the kernels take them: its defaults, its first one `attr`.
inline k::AttrValues attr_values(const k::OpDesc& op, float attr) {
  k::AttrValues values = k::default_attrs(op);
  if (op.nb_attrs > 0) values.v[0] = attr;
  return values;
}

// in: X, W, dY, R, dH; out: Y (backward dX), dW, H (backward dR); the ones an op lacks unused.
// Backward of a weighted op: dX and dW (float32) through `workspace` (row_norm_backward_workspace_size).
// TW: W's type (T, or float beside a 16-bit X: a mixed-dtype call).
template <class T, class TW = T>
cudaError_t launch_op(int op, bool backward, int64_t rows, int64_t cols, float attr, void* const* in,
                      void* const* out, void* workspace, cudaStream_t s) {
  if (!valid_op(op)) return cudaErrorInvalidValue;
  const k::OpDesc& desc = op_of(op);
  const k::AttrValues values = attr_values(desc, attr);
  const T* a = static_cast<const T*>(in[0]);
  const TW* w = static_cast<const TW*>(in[1]);
  const T* dy = static_cast<const T*>(in[2]);
  const T* r = static_cast<const T*>(in[3]);
  const T* dh = static_cast<const T*>(in[4]);
  T* y = static_cast<T*>(out[0]);
  float* dw = static_cast<float*>(out[1]);
  T* h = static_cast<T*>(out[2]);
#define OPFORGE_TEST_ELEMENTWISE(Name, name)                                                       \
  if (&desc == &k::k##Name##Op) {                                                                  \
    const auto fn = k::functor_of<k::Name##Math<>, k::k##Name##Op>(values);                         \
    return backward ? kc::elementwise_backward(dy, a, y, rows * cols, fn, s)                         \
                    : kc::elementwise_forward(a, y, rows * cols, fn, s);                             \
  }
#define OPFORGE_TEST_GATED(Name, name)                                                             \
  if (&desc == &k::k##Name##Op) {                                                                  \
    const auto gate = k::functor_of<k::Name##Math<>, k::k##Name##Op>(values);                       \
    return backward ? kc::gated_backward(dy, a, y, rows, cols / 2, gate, s)                          \
                    : kc::gated_forward(a, y, rows, cols / 2, gate, s);                              \
  }
#define OPFORGE_TEST_ROW_NORM(Name, name)                                                          \
  if (&desc == &k::k##Name##Op) {                                                                  \
    const auto norm = k::functor_of<k::Name##Math, k::k##Name##Op>(values);                         \
    return backward ? kc::row_norm_backward(dy, a, w, y, dw, workspace, rows, cols, norm, s)        \
                    : kc::row_norm_forward(a, w, y, rows, cols, norm, s);                            \
  }
#define OPFORGE_TEST_RESIDUAL_ROW_NORM(Name, name)                                                 \
  if (&desc == &k::k##Name##Op) {                                                                  \
    const auto norm = k::functor_of<k::Name##Math, k::k##Name##Op>(values);                         \
    return backward ? kc::residual_row_norm_backward(dy, dh, a, r, w, y, h, dw, workspace, rows,     \
                                                     cols, norm, s)                                  \
                    : kc::residual_row_norm_forward(a, r, w, y, h, rows, cols, norm, s);             \
  }
  OPFORGE_FOR_EACH_ELEMENTWISE_OP(OPFORGE_TEST_ELEMENTWISE)
  OPFORGE_FOR_EACH_GATED_OP(OPFORGE_TEST_GATED)
  OPFORGE_FOR_EACH_ROW_NORM_OP(OPFORGE_TEST_ROW_NORM)
  OPFORGE_FOR_EACH_RESIDUAL_ROW_NORM_OP(OPFORGE_TEST_RESIDUAL_ROW_NORM)
#undef OPFORGE_TEST_ELEMENTWISE
#undef OPFORGE_TEST_GATED
#undef OPFORGE_TEST_ROW_NORM
#undef OPFORGE_TEST_RESIDUAL_ROW_NORM
  return cudaErrorInvalidValue;  // an op of a shape this harness does not know
}

// The forward of an op of a quantized rows' family (row_norm_quant, residual_row_norm_quant) with
// its attributes `attrs` (nb_attrs of them): in X, W, R (R of a residual op); out Q (int8 or
// float8 e4m3fn bits), Scale (float32, one per row), H (a residual op's, T). TW: W's type.
template <class T, class TW = T>
cudaError_t launch_quant_op(int op, int64_t rows, int64_t cols, const float* attrs, const void* const* in,
                            void* const* out, cudaStream_t s) {
  if (!valid_op(op)) return cudaErrorInvalidValue;
  const k::OpDesc& desc = op_of(op);
  k::AttrValues values = k::default_attrs(desc);
  for (int32_t i = 0; i < desc.nb_attrs; ++i) values.v[i] = attrs[i];
  const T* x = static_cast<const T*>(in[0]);
  const TW* w = static_cast<const TW*>(in[1]);
  const T* r = static_cast<const T*>(in[2]);
  float* scale = static_cast<float*>(out[1]);
#define OPFORGE_TEST_ROW_NORM_QUANT(Name, name)                                                    \
  if (&desc == &k::k##Name##Op)                                                                    \
    return kc::row_norm_quant_forward(x, w, out[0], scale, rows, cols,                             \
                                      k::functor_of<k::Name##Math, k::k##Name##Op>(values), s);
#define OPFORGE_TEST_RESIDUAL_ROW_NORM_QUANT(Name, name)                                           \
  if (&desc == &k::k##Name##Op)                                                                    \
    return kc::residual_row_norm_quant_forward(x, r, w, out[0], scale, static_cast<T*>(out[2]), rows, \
                                               cols, k::functor_of<k::Name##Math, k::k##Name##Op>(values), s);
  OPFORGE_FOR_EACH_ROW_NORM_QUANT_OP(OPFORGE_TEST_ROW_NORM_QUANT)
  OPFORGE_FOR_EACH_RESIDUAL_ROW_NORM_QUANT_OP(OPFORGE_TEST_RESIDUAL_ROW_NORM_QUANT)
#undef OPFORGE_TEST_ROW_NORM_QUANT
#undef OPFORGE_TEST_RESIDUAL_ROW_NORM_QUANT
  return cudaErrorInvalidValue;  // not an op of a quantized family
}

}  // namespace opforge_test
