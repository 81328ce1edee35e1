#include "common.h"

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

// As Python prints torch.device, so the fake kernels' messages match these.
std::string device_str(const Tensor& t) {
  using torch::headeronly::DeviceType;
  const torch::stable::Device device = t.device();
  std::string name;
  switch (device.type()) {
    case DeviceType::CPU: name = "cpu"; break;
    case DeviceType::CUDA: name = "cuda"; break;
    case DeviceType::Meta: name = "meta"; break;
    default: name = "device type " + std::to_string(static_cast<int>(device.type())); break;
  }
  return device.has_index() ? name + ":" + std::to_string(device.index()) : name;
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

// Only a direct redispatch can hand a kernel tensors of another device; refuse before reading them.
void check_backend_device(Backend backend, const char* op, const Tensor& x) {
  const bool on_backend = backend == Backend::CPU ? x.is_cpu() : x.is_cuda();
  if (!on_backend)
    fail(op, "X", backend == Backend::CPU ? "a tensor on cpu" : "a tensor on cuda", device_str(x));
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

// Checked before anything else: with tensors on two devices the dispatcher picks one device's
// kernel (a meta weight sends a CPU call to the fake kernel), so nothing else can be trusted.
void check_same_device(const char* op, const char* name, const Tensor& t, const char* ref_name,
                       const Tensor& ref) {
  if (device_str(t) != device_str(ref))
    fail(op, name, "a tensor on " + device_str(ref) + " (device of " + ref_name + ")",
         device_str(t));
}

// `t` must have the dtype of the reference input `ref` (named `ref_name`).
void check_same_dtype(const char* op, const char* name, const Tensor& t, const char* ref_name,
                      const Tensor& ref) {
  if (t.scalar_type() != ref.scalar_type())
    fail(op, name, "dtype " + dtype_str(ref.scalar_type()) + " (dtype of " + ref_name + ")",
         dtype_str(t.scalar_type()));
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t d = 0; d < shape.size(); ++d) text += (d ? ", " : "") + std::to_string(shape[d]);
  return text + "]";
}

void check_shape(const char* op, const char* name, const Tensor& t,
                 const std::vector<int64_t>& shape, const char* ref_name) {
  if (shape_str(t) != shape_str(shape))
    fail(op, name, "shape " + shape_str(shape) + " (shape of " + ref_name + ")", shape_str(t));
}

void check_same_shape(const char* op, const char* name, const Tensor& t, const char* ref_name,
                      const Tensor& ref) {
  check_shape(op, name, t, shape_of(ref), ref_name);
}

void check_swiglu_shape(const Tensor& x) {
  const bool valid = x.dim() >= 1 && x.size(x.dim() - 1) >= 2 && x.size(x.dim() - 1) % 2 == 0;
  if (!valid)
    fail(kSwiGLU, "X", opforge::kernels::kSwiGLUXExpected,
         x.dim() == 0 ? std::string("rank 0") : "shape " + shape_str(x));
}

void check_weight(const Tensor& x, const Tensor& w) {
  check_same_dtype(kRMSNorm, "W", w, "X", x);
  const int64_t cols = x.size(x.dim() - 1);
  if (w.dim() != 1 || w.size(0) != cols)
    fail(kRMSNorm, "W",
         opforge::kernels::kRMSNormWeightExpected + std::to_string(cols) +
             opforge::kernels::kRMSNormWeightSuffix,
         "shape " + shape_str(w));
}

void check_rank(const Tensor& x) {
  if (x.dim() < 1) fail(kRMSNorm, "X", opforge::kernels::kRankAtLeast1, "rank 0");
}

// The shared attribute rule (finite once rounded to the float32 the kernels use).
void check_attr(const opforge::kernels::AttrSpec& attr, double value) {
  const std::string error = opforge::kernels::attr_error(attr, value);
  if (!error.empty()) throw std::runtime_error(error);
}

}  // namespace

void fail(const char* op, const std::string& what, const std::string& expected,
          const std::string& got) {
  throw std::runtime_error(opforge::kernels::error_text(op, what, expected, got));
}

void check_swish(Backend backend, const Tensor& x, double beta) {
  check_backend_device(backend, kSwish, x);
  check_dtype(backend, kSwish, "X", x);
  check_attr(opforge::kernels::kSwishBeta, beta);
}

void check_swish_backward(Backend backend, const Tensor& dy, const Tensor& x, double beta) {
  check_same_device(kSwish, "dY", dy, "X", x);
  check_swish(backend, x, beta);
  check_same_dtype(kSwish, "dY", dy, "X", x);
  check_same_shape(kSwish, "dY", dy, "X", x);
}

void check_rms_norm(Backend backend, const Tensor& x, const Tensor& w, double epsilon) {
  check_same_device(kRMSNorm, "W", w, "X", x);
  check_backend_device(backend, kRMSNorm, x);
  check_dtype(backend, kRMSNorm, "X", x);
  check_rank(x);
  check_weight(x, w);
  check_attr(opforge::kernels::kRMSNormEpsilon, epsilon);
}

void check_rms_norm_backward(Backend backend, const Tensor& dy, const Tensor& x, const Tensor& w,
                             double epsilon) {
  check_same_device(kRMSNorm, "dY", dy, "X", x);
  check_rms_norm(backend, x, w, epsilon);
  check_same_dtype(kRMSNorm, "dY", dy, "X", x);
  check_same_shape(kRMSNorm, "dY", dy, "X", x);
}

void check_swiglu(Backend backend, const Tensor& x, double beta) {
  check_backend_device(backend, kSwiGLU, x);
  check_dtype(backend, kSwiGLU, "X", x);
  check_swiglu_shape(x);
  check_attr(opforge::kernels::kSwiGLUBeta, beta);
}

void check_swiglu_backward(Backend backend, const Tensor& dy, const Tensor& x, double beta) {
  check_same_device(kSwiGLU, "dY", dy, "X", x);
  check_swiglu(backend, x, beta);
  check_same_dtype(kSwiGLU, "dY", dy, "X", x);
  check_shape(kSwiGLU, "dY", dy, swiglu_output_shape(x), "Y");
}

void check_out(const char* op, const Tensor& out, const Tensor& x, const std::vector<int64_t>& shape) {
  check_same_device(op, "out", out, "X", x);
  check_same_dtype(op, "out", out, "X", x);
  check_shape(op, "out", out, shape, "Y");
}

std::vector<int64_t> shape_of(const Tensor& t) {
  std::vector<int64_t> shape(t.dim());
  for (int64_t d = 0; d < t.dim(); ++d) shape[d] = t.size(d);
  return shape;
}

std::vector<int64_t> swiglu_output_shape(const Tensor& x) {
  std::vector<int64_t> shape = shape_of(x);
  shape.back() /= 2;
  return shape;
}

RowShape row_shape(const Tensor& x) {
  const int64_t cols = x.size(x.dim() - 1);
  return {cols == 0 ? 0 : x.numel() / cols, cols};
}

}  // namespace opforge_torch
