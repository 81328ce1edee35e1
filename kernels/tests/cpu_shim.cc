// Exposes kernels/cpu.h through a C ABI so the Python tests can drive it with ctypes.
#include "opforge/kernels/cpu.h"
#include "opforge/kernels/cpu_ops.h"

namespace k = opforge::kernels;
namespace cpu = opforge::kernels::cpu;

using Swish = cpu::CpuMath<k::SwishMath>;
using SwiGLU = cpu::CpuMath<k::SwiGLUMath>;
using GeGLU = cpu::CpuMath<k::GeGLUMath>;

#define SHIM(T, SUFFIX)                                                                      \
  extern "C" void swish_fwd_##SUFFIX(const T* x, T* y, int64_t n, float beta) {              \
    cpu::elementwise_forward(x, y, n, Swish{beta});                                          \
  }                                                                                          \
  extern "C" void swish_fwd_streamed_##SUFFIX(const T* x, T* y, int64_t n, float beta) {     \
    cpu::elementwise_forward_streamed(x, y, n, Swish{beta});                                 \
  }                                                                                          \
  extern "C" void swish_bwd_##SUFFIX(const T* dy, const T* x, T* dx, int64_t n, float beta) { \
    cpu::elementwise_backward(dy, x, dx, n, Swish{beta});                                    \
  }                                                                                          \
  extern "C" void swiglu_fwd_##SUFFIX(const T* x, T* y, int64_t rows, int64_t d, float beta) { \
    cpu::gated_forward(x, y, 0, rows, d, SwiGLU{beta});                                      \
  }                                                                                          \
  extern "C" void swiglu_bwd_##SUFFIX(const T* dy, const T* x, T* dx, int64_t rows, int64_t d, \
                                      float beta) {                                          \
    cpu::gated_backward(dy, x, dx, 0, rows, d, SwiGLU{beta});                                \
  }                                                                                          \
  extern "C" void geglu_fwd_##SUFFIX(const T* x, T* y, int64_t rows, int64_t d) {           \
    cpu::gated_forward(x, y, 0, rows, d, GeGLU{});                                           \
  }                                                                                          \
  extern "C" void geglu_bwd_##SUFFIX(const T* dy, const T* x, T* dx, int64_t rows, int64_t d) { \
    cpu::gated_backward(dy, x, dx, 0, rows, d, GeGLU{});                                     \
  }                                                                                          \
  extern "C" void rms_fwd_##SUFFIX(const T* x, const T* w, T* y, int64_t rows, int64_t cols, \
                                   float eps) {                                              \
    cpu::row_norm_forward(x, w, y, 0, rows, cols, k::RMSNormMath{eps});                      \
  }                                                                                          \
  extern "C" void rms_bwd_##SUFFIX(const T* dy, const T* x, const T* w, T* dx, double* dw,   \
                                   int64_t rows, int64_t cols, float eps) {                  \
    cpu::row_norm_backward(dy, x, w, dx, dw, 0, rows, cols, k::RMSNormMath{eps});            \
  }                                                                                          \
  extern "C" void add_rms_fwd_##SUFFIX(const T* x, const T* r, const T* w, T* y, T* h,       \
                                       int64_t rows, int64_t cols, float eps) {              \
    cpu::residual_row_norm_forward(x, r, w, y, h, 0, rows, cols, k::AddRMSNormMath{eps});    \
  }                                                                                          \
  extern "C" void add_rms_bwd_##SUFFIX(const T* dy, const T* dh, const T* x, const T* r,     \
                                       const T* w, T* dx, T* dr, double* dw, int64_t rows,   \
                                       int64_t cols, float eps) {                            \
    cpu::residual_row_norm_backward(dy, dh, x, r, w, dx, dr, dw, 0, rows, cols,              \
                                    k::AddRMSNormMath{eps});                                 \
  }

SHIM(float, f32)
SHIM(double, f64)
SHIM(k::bfloat16, bf16)

#include "opforge/kernels/attrs.h"
#include "opforge/kernels/shapes.h"

#include <cstring>
#include <type_traits>

// Writes attrs.h's verdict for (op, its attribute `index`, value) into `out`: "" when valid, else
// the error text; "no such attribute" when the descriptors have none there.
extern "C" void attr_error(const char* op, int index, double value, char* out, size_t size) {
  for (const k::OpDesc* d : k::kOps) {
    if (std::strcmp(op, d->name) != 0 || index >= d->nb_attrs) continue;
    std::snprintf(out, size, "%s", k::attr_error(*d->attrs[index], value).c_str());
    return;
  }
  std::snprintf(out, size, "no such attribute");
}

// shapes.h's W dtype verdict for (op, X's and W's ONNX type codes) into `out`: "" or the error text.
extern "C" void weight_dtype_error(const char* op, int x_code, int w_code, char* out, size_t size) {
  for (const k::OpDesc* d : k::kOps) {
    if (std::strcmp(op, d->name) != 0) continue;
    std::snprintf(out, size, "%s",
                  k::weight_dtype_error(*d, static_cast<k::ElemType>(x_code), static_cast<k::ElemType>(w_code)).c_str());
    return;
  }
  std::snprintf(out, size, "no such op");
}

// Every op of the spec by its index in kOps (spec order), through its binding (cpu_ops.h): the
// forward over all rows, with the op's attributes (`attrs`, nb_attrs of them). X, R and W in (nullptr
// where the op has none), `outputs` its nb_outputs outputs in descriptor order, each of its own
// dtype (Y[, H]; Q, Scale[, H]); -1 for an index past the ops.
// TW: W's type, T or float beside a bfloat16 X (a mixed-dtype call: Forward::w_float32).
template <class T, class TW = T>
int op_forward(int op, const T* x, const T* r, const TW* w, void* const* outputs, int64_t rows, int64_t cols,
               const float* attrs) {
  if (op < 0 || op >= int(sizeof k::kOps / sizeof k::kOps[0])) return -1;
  k::AttrValues values;
  for (int32_t i = 0; i < k::kOps[op]->nb_attrs; ++i) values.v[i] = attrs[i];
  cpu::Forward<T> args{x, nullptr, static_cast<T*>(outputs[0]), cols, values};
  if constexpr (std::is_same_v<T, TW>) {
    args.w = w;
  } else {
    args.w_float32 = w;
  }
  args.r = r;
  if (k::kOps[op]->nb_outputs > 1) args.h = static_cast<T*>(outputs[1]);
  args.outputs = outputs;
  int found = -1;
#define OPFORGE_SHIM_FORWARD(Name)                 \
  if (k::kOps[op] == &cpu::Name##Kernel::desc) {   \
    cpu::Name##Kernel::forward<T>(args, 0, rows);  \
    found = 0;                                     \
  }
  OPFORGE_FOR_EACH_OP(OPFORGE_SHIM_FORWARD)
#undef OPFORGE_SHIM_FORWARD
  return found;
}

// The backward of every op of a launcher family by its index in kOps: dX of a single-input op
// (elementwise, gated), dX and dW (added into `dw`) of a row op, and dR (= dX) of a residual one;
// dH is a residual op's second gradient. -1 for an op of another shape.
template <class T, class TW = T>
int op_backward(int op, const T* dy, const T* dh, const T* x, const T* r, const TW* w, T* dx, T* dr,
                double* dw, int64_t rows, int64_t cols, const float* attrs) {
  if (op < 0 || op >= int(sizeof k::kOps / sizeof k::kOps[0])) return -1;
  k::AttrValues values;
  for (int32_t i = 0; i < k::kOps[op]->nb_attrs; ++i) values.v[i] = attrs[i];
  int found = -1;
#define OPFORGE_SHIM_BACKWARD(Name, name)                                 \
  if (k::kOps[op] == &cpu::Name##Kernel::desc) {                          \
    cpu::Name##Kernel::backward<T>({dy, x, dx, cols, values}, 0, rows);   \
    found = 0;                                                            \
  }
#define OPFORGE_SHIM_ROW_BACKWARD(Name, name)                                                      \
  if (k::kOps[op] == &cpu::Name##Kernel::desc) {                                                   \
    cpu::row_norm_backward<T>(dy, x, w, dx, dw, 0, rows, cols, cpu::Name##Kernel::norm(values));    \
    found = 0;                                                                                     \
  }
#define OPFORGE_SHIM_RESIDUAL_BACKWARD(Name, name)                                                 \
  if (k::kOps[op] == &cpu::Name##Kernel::desc) {                                                   \
    cpu::residual_row_norm_backward<T>(dy, dh, x, r, w, dx, dr, dw, 0, rows, cols,                 \
                                       cpu::Name##Kernel::norm(values));                            \
    found = 0;                                                                                     \
  }
  OPFORGE_FOR_EACH_ELEMENTWISE_OP(OPFORGE_SHIM_BACKWARD)
  OPFORGE_FOR_EACH_GATED_OP(OPFORGE_SHIM_BACKWARD)
  OPFORGE_FOR_EACH_ROW_NORM_OP(OPFORGE_SHIM_ROW_BACKWARD)
  OPFORGE_FOR_EACH_RESIDUAL_ROW_NORM_OP(OPFORGE_SHIM_RESIDUAL_BACKWARD)
#undef OPFORGE_SHIM_BACKWARD
#undef OPFORGE_SHIM_ROW_BACKWARD
#undef OPFORGE_SHIM_RESIDUAL_BACKWARD
  return found;
}

#define OP_SHIM(T, SUFFIX)                                                                       \
  extern "C" int op_forward_##SUFFIX(int op, const T* x, const T* r, const T* w,                 \
                                     void* const* outputs, int64_t rows, int64_t cols,           \
                                     const float* attrs) {                                       \
    return op_forward<T>(op, x, r, w, outputs, rows, cols, attrs);                               \
  }                                                                                              \
  extern "C" int op_backward_##SUFFIX(int op, const T* dy, const T* dh, const T* x, const T* r,  \
                                      const T* w, T* dx, T* dr, double* dw, int64_t rows,        \
                                      int64_t cols, const float* attrs) {                        \
    return op_backward<T>(op, dy, dh, x, r, w, dx, dr, dw, rows, cols, attrs);                   \
  }

OP_SHIM(float, f32)
OP_SHIM(double, f64)
OP_SHIM(k::bfloat16, bf16)  // bfloat16 storage: the quantized ops' tests by descriptor (test_kernels.py)

// A bfloat16 X with a float32 W (test_op_bindings.py: the mixed-dtype call is the float32 one).
extern "C" int op_forward_bf16_wf32(int op, const k::bfloat16* x, const k::bfloat16* r, const float* w,
                                    void* const* outputs, int64_t rows, int64_t cols, const float* attrs) {
  return op_forward<k::bfloat16, float>(op, x, r, w, outputs, rows, cols, attrs);
}
extern "C" int op_backward_bf16_wf32(int op, const k::bfloat16* dy, const k::bfloat16* dh, const k::bfloat16* x,
                                     const k::bfloat16* r, const float* w, k::bfloat16* dx, k::bfloat16* dr,
                                     double* dw, int64_t rows, int64_t cols, const float* attrs) {
  return op_backward<k::bfloat16, float>(op, dy, dh, x, r, w, dx, dr, dw, rows, cols, attrs);
}
