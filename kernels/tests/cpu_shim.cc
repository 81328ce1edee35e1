// Exposes kernels/cpu.h through a C ABI so the Python tests can drive it with ctypes.
#include "opforge/kernels/cpu.h"

namespace k = opforge::kernels;
namespace cpu = opforge::kernels::cpu;

#define SHIM(T, SUFFIX)                                                                      \
  extern "C" void swish_fwd_##SUFFIX(const T* x, T* y, int64_t n, float beta) {              \
    cpu::swish_forward(x, y, n, beta);                                                       \
  }                                                                                          \
  extern "C" void swish_fwd_streamed_##SUFFIX(const T* x, T* y, int64_t n, float beta) {     \
    cpu::swish_forward_streamed(x, y, n, beta);                                              \
  }                                                                                          \
  extern "C" void swish_bwd_##SUFFIX(const T* dy, const T* x, T* dx, int64_t n, float beta) { \
    cpu::swish_backward(dy, x, dx, n, beta);                                                 \
  }                                                                                          \
  extern "C" void swiglu_fwd_##SUFFIX(const T* x, T* y, int64_t rows, int64_t d, float beta) { \
    cpu::gated_forward(x, y, 0, rows, d, cpu::CpuGate<k::SwiGLUGate>{beta});                                             \
  }                                                                                          \
  extern "C" void swiglu_bwd_##SUFFIX(const T* dy, const T* x, T* dx, int64_t rows, int64_t d, \
                                      float beta) {                                          \
    cpu::gated_backward(dy, x, dx, 0, rows, d, cpu::CpuGate<k::SwiGLUGate>{beta});                                       \
  }                                                                                          \
  extern "C" void geglu_fwd_##SUFFIX(const T* x, T* y, int64_t rows, int64_t d) {           \
    cpu::gated_forward(x, y, 0, rows, d, cpu::CpuGate<k::GeGLUGate>{});                      \
  }                                                                                          \
  extern "C" void geglu_bwd_##SUFFIX(const T* dy, const T* x, T* dx, int64_t rows, int64_t d) { \
    cpu::gated_backward(dy, x, dx, 0, rows, d, cpu::CpuGate<k::GeGLUGate>{});                \
  }                                                                                          \
  extern "C" void rms_fwd_##SUFFIX(const T* x, const T* w, T* y, int64_t rows, int64_t cols, \
                                   float eps) {                                              \
    cpu::rms_norm_forward(x, w, y, 0, rows, cols, eps);                                      \
  }                                                                                          \
  extern "C" void rms_bwd_##SUFFIX(const T* dy, const T* x, const T* w, T* dx, double* dw,   \
                                   int64_t rows, int64_t cols, float eps) {                  \
    cpu::rms_norm_backward(dy, x, w, dx, dw, 0, rows, cols, eps);                            \
  }                                                                                          \
  extern "C" void add_rms_fwd_##SUFFIX(const T* x, const T* r, const T* w, T* y, T* h,       \
                                       int64_t rows, int64_t cols, float eps) {              \
    cpu::add_rms_norm_forward(x, r, w, y, h, 0, rows, cols, eps);                            \
  }                                                                                          \
  extern "C" void add_rms_bwd_##SUFFIX(const T* dy, const T* dh, const T* x, const T* r,     \
                                       const T* w, T* dx, T* dr, double* dw, int64_t rows,   \
                                       int64_t cols, float eps) {                            \
    cpu::add_rms_norm_backward(dy, dh, x, r, w, dx, dr, dw, 0, rows, cols, eps);             \
  }

SHIM(float, f32)
SHIM(double, f64)
SHIM(k::bfloat16, bf16)

#include "opforge/kernels/attrs.h"

#include <cstring>

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
