#include "common.h"

#include <cmath>
#include <sstream>
#include <stdexcept>

namespace opforge_torch {
namespace {

std::string shape_str(const Tensor& t) {
  std::ostringstream out;
  out << '[';
  for (int64_t d = 0; d < t.dim(); ++d) out << (d ? ", " : "") << t.size(d);
  out << ']';
  return out.str();
}

std::string device_str(const Tensor& t) {
  return t.is_cuda() ? "cuda:" + std::to_string(t.get_device_index()) : "cpu";
}

std::string dtype_str(ScalarType t) {
  switch (t) {
    case ScalarType::Float: return "float32";
    case ScalarType::Double: return "float64";
    case ScalarType::Half: return "float16";
    case ScalarType::BFloat16: return "bfloat16";
    case ScalarType::Long: return "int64";
    case ScalarType::Int: return "int32";
    case ScalarType::Short: return "int16";
    case ScalarType::Char: return "int8";
    case ScalarType::Byte: return "uint8";
    case ScalarType::Bool: return "bool";
    default: return torch::headeronly::toString(t);
  }
}

bool dtype_supported(Backend backend, ScalarType t) {
  if (t == ScalarType::Float || t == ScalarType::BFloat16) return true;
  return backend == Backend::CPU ? t == ScalarType::Double : t == ScalarType::Half;
}

void check_dtype(Backend backend, const char* op, const char* name, const Tensor& t) {
  if (dtype_supported(backend, t.scalar_type())) return;
  const char* allowed = backend == Backend::CPU ? "float32, float64 or bfloat16 tensor on CPU"
                                                : "float32, float16 or bfloat16 tensor on CUDA";
  fail(op, name, allowed, dtype_str(t.scalar_type()));
}

// `t` must share dtype and device with the reference input `ref` (named `ref_name`).
void check_like(const char* op, const char* name, const Tensor& t, const char* ref_name,
                const Tensor& ref) {
  if (t.scalar_type() != ref.scalar_type())
    fail(op, name, "dtype " + dtype_str(ref.scalar_type()) + " (dtype of " + ref_name + ")",
         dtype_str(t.scalar_type()));
  if (device_str(t) != device_str(ref))
    fail(op, name, "a tensor on " + device_str(ref) + " (device of " + ref_name + ")",
         device_str(t));
}

void check_same_shape(const char* op, const char* name, const Tensor& t, const char* ref_name,
                      const Tensor& ref) {
  if (shape_str(t) != shape_str(ref))
    fail(op, name, "shape " + shape_str(ref) + " (shape of " + ref_name + ")", shape_str(t));
}

std::string number_str(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

void check_weight(const Tensor& x, const Tensor& w) {
  check_like(kRMSNorm, "W", w, "X", x);
  const int64_t cols = x.size(x.dim() - 1);
  if (w.dim() != 1 || w.size(0) != cols)
    fail(kRMSNorm, "W",
         "1-D tensor of length " + std::to_string(cols) + " (last dim of X)",
         "shape " + shape_str(w));
}

void check_rank(const Tensor& x) {
  if (x.dim() < 1) fail(kRMSNorm, "X", "a tensor of rank >= 1", "rank 0");
}

void check_epsilon(double epsilon) {
  if (!std::isfinite(epsilon) || epsilon < 0)
    fail(kRMSNorm, "epsilon", "a finite value >= 0", number_str(epsilon));
}

void check_beta(double beta) {
  if (!std::isfinite(beta)) fail(kSwish, "beta", "a finite value", number_str(beta));
}

}  // namespace

void fail(const char* op, const std::string& what, const std::string& expected,
          const std::string& got) {
  throw std::runtime_error(std::string("opforge.") + op + ": " + what + ": expected " + expected +
                           ", got " + got);
}

void check_swish(Backend backend, const Tensor& x, double beta) {
  check_dtype(backend, kSwish, "X", x);
  check_beta(beta);
}

void check_swish_backward(Backend backend, const Tensor& dy, const Tensor& x, double beta) {
  check_swish(backend, x, beta);
  check_like(kSwish, "dY", dy, "X", x);
  check_same_shape(kSwish, "dY", dy, "X", x);
}

void check_rms_norm(Backend backend, const Tensor& x, const Tensor& w, double epsilon) {
  check_dtype(backend, kRMSNorm, "X", x);
  check_rank(x);
  check_weight(x, w);
  check_epsilon(epsilon);
}

void check_rms_norm_backward(Backend backend, const Tensor& dy, const Tensor& x, const Tensor& w,
                             double epsilon) {
  check_rms_norm(backend, x, w, epsilon);
  check_like(kRMSNorm, "dY", dy, "X", x);
  check_same_shape(kRMSNorm, "dY", dy, "X", x);
}

RowShape row_shape(const Tensor& x) {
  const int64_t cols = x.size(x.dim() - 1);
  return {cols == 0 ? 0 : x.numel() / cols, cols};
}

}  // namespace opforge_torch
