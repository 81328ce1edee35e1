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
  extern "C" void rms_fwd_##SUFFIX(const T* x, const T* w, T* y, int64_t rows, int64_t cols, \
                                   float eps) {                                              \
    cpu::rms_norm_forward(x, w, y, 0, rows, cols, eps);                                      \
  }                                                                                          \
  extern "C" void rms_bwd_##SUFFIX(const T* dy, const T* x, const T* w, T* dx, double* dw,   \
                                   int64_t rows, int64_t cols, float eps) {                  \
    cpu::rms_norm_backward(dy, x, w, dx, dw, 0, rows, cols, eps);                            \
  }

SHIM(float, f32)
SHIM(double, f64)
SHIM(k::bfloat16, bf16)

#include "opforge/kernels/attrs.h"

#include <cstring>

// Writes attrs.h's verdict for (op, value) into `out`: "" when valid, else the error text.
extern "C" void attr_error(const char* op, double value, char* out, size_t size) {
  const k::AttrSpec& attr = std::strcmp(op, "Swish") == 0    ? k::kSwishBeta
                            : std::strcmp(op, "SwiGLU") == 0 ? k::kSwiGLUBeta
                                                             : k::kRMSNormEpsilon;
  std::snprintf(out, size, "%s", k::attr_error(attr, value).c_str());
}
