#include "common.h"

#include <cctype>
#include <cstdint>
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
    case ScalarType::Float8_e4m3fn: return "float8_e4m3fn";
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

void check_x_shape(const OpDesc& op, const Tensor& x) {
  const std::vector<int64_t> shape = shape_of(x);
  const std::string error = opforge::kernels::x_shape_error(op, shape.data(), x.dim());
  if (!error.empty()) throw std::runtime_error(error);
}

opforge::kernels::ElemType elem_type_of(ScalarType t) {
  using opforge::kernels::ElemType;
  switch (t) {
    case ScalarType::Float: return ElemType::kFloat32;
    case ScalarType::Double: return ElemType::kFloat64;
    case ScalarType::Half: return ElemType::kFloat16;
    case ScalarType::BFloat16: return ElemType::kBFloat16;
    case ScalarType::Char: return ElemType::kInt8;
    case ScalarType::Float8_e4m3fn: return ElemType::kFloat8E4M3FN;
    default: return ElemType::kLikeX;  // no element type of the kernels: never a valid W
  }
}

// The shared rule (shapes.h weight_dtype_ok): X's dtype, or float32 with a 16-bit X.
void check_weight_dtype(const OpDesc& op, const Tensor& x, const Tensor& w) {
  const auto w_type = elem_type_of(w.scalar_type());
  std::string error = opforge::kernels::weight_dtype_error(op, elem_type_of(x.scalar_type()), w_type);
  if (error.empty()) return;
  // a dtype the kernels have no element type for (int64, bool): named as the other messages name it
  if (*opforge::kernels::elem_type_name(w_type) == '\0')
    error = error.substr(0, error.rfind(", got ") + 6) + dtype_str(w.scalar_type());
  throw std::runtime_error(error);
}

void check_weight(const OpDesc& op, const Tensor& x, const Tensor& w) {
  check_weight_dtype(op, x, w);
  const std::vector<int64_t> x_shape = shape_of(x), w_shape = shape_of(w);
  const std::string error =
      opforge::kernels::w_shape_error(op, x_shape.data(), x.dim(), w_shape.data(), w.dim());
  if (!error.empty()) throw std::runtime_error(error);
}

void check_residual(const OpDesc& op, const Tensor& x, const Tensor& r) {
  check_same_dtype(op.name, "R", r, "X", x);
  const std::vector<int64_t> x_shape = shape_of(x), r_shape = shape_of(r);
  const std::string error =
      opforge::kernels::r_shape_error(op, x_shape.data(), x.dim(), r_shape.data(), r.dim());
  if (!error.empty()) throw std::runtime_error(error);
}

// The shared attribute rule (finite once rounded to the float32 the kernels use).
void check_attr(const opforge::kernels::AttrSpec& attr, double value) {
  const std::string error = opforge::kernels::attr_error(attr, value);
  if (!error.empty()) throw std::runtime_error(error);
}

// The bytes [first, last) that a tensor's elements span (torch strides are never negative).
struct Span {
  uintptr_t first = 0, last = 0;
};

Span span_of(const Tensor& t) {
  if (t.numel() == 0) return {};
  int64_t elements = 1;
  for (int64_t d = 0; d < t.dim(); ++d) elements += (t.size(d) - 1) * t.stride(d);
  const auto first = reinterpret_cast<uintptr_t>(t.const_data_ptr());
  return {first, first + static_cast<uintptr_t>(elements) * t.element_size()};
}

bool same_layout(const Tensor& a, const Tensor& b) {
  if (a.const_data_ptr() != b.const_data_ptr() || a.dim() != b.dim()) return false;
  for (int64_t d = 0; d < a.dim(); ++d)
    if (a.size(d) != b.size(d) || a.stride(d) != b.stride(d)) return false;
  return true;
}

// The kernels read a contiguous input in place and write a contiguous `out` in place (a
// non-contiguous input is copied first, a non-contiguous `out` written through a temporary), so
// only a contiguous pair shares memory while the kernel runs. Such a pair is refused, as aten
// refuses partial overlap, unless the output is the input itself and the op's spec lets that
// output write over that input (each row read before it is written: never W, read by every row).
void check_output_over_input(const char* op, const char* out_name, const Tensor& out, const char* name,
                             const Tensor& input, bool may_be_input) {
  if (!out.is_contiguous() || !input.is_contiguous() || !overlaps(out, input)) return;
  const bool is_input = same_layout(out, input);
  if (may_be_input && is_input) return;
  if (may_be_input)
    fail(op, out_name,
         std::string("a tensor that shares no memory with ") + name + " or is " + name + " itself",
         std::string("one that partially overlaps ") + name);
  fail(op, out_name, std::string("a tensor that shares no memory with ") + name,
       is_input ? std::string(name) + " itself" : std::string("one that overlaps ") + name);
}

// Two outputs are written by the same kernel: one that shares memory with the other (even
// entirely) would have one's values written over the other's.
void check_apart(const char* op, const std::string& name, const Tensor& out,
                 const std::string& other_name, const Tensor& other) {
  if (overlaps(out, other))
    fail(op, name, "a tensor that shares no memory with " + other_name, "one that overlaps " + other_name);
}

// "Y, H" -> {"Y", "H"} (the descriptor's list of names).
std::vector<std::string> names_of(const char* list) {
  std::vector<std::string> names;
  std::string name;
  for (const char* c = list; ; ++c) {
    if (*c == ',' || *c == '\0') {
      names.push_back(name);
      name.clear();
      if (*c == '\0') break;
    } else if (*c != ' ') {
      name += *c;
    }
  }
  return names;
}

// The schema's name of output i: `out` for a single output, else <output>_out (y_out, h_out).
std::string out_name(const OpDesc& op, size_t i) {
  if (op.nb_outputs == 1) return "out";
  std::string name = names_of(op.outputs)[i];
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name + "_out";
}

// The op's inputs with their names, in the descriptor's order.
std::vector<std::pair<const char*, const Tensor*>> named_inputs(const Inputs& in) {
  std::vector<std::pair<const char*, const Tensor*>> named{{"X", in.x}};
  if (in.r != nullptr) named.emplace_back("R", in.r);
  if (in.w != nullptr) named.emplace_back("W", in.w);
  return named;
}

}  // namespace

void fail(const char* op, const std::string& what, const std::string& expected,
          const std::string& got) {
  throw std::runtime_error(opforge::kernels::error_text(op, what, expected, got));
}

opforge::kernels::AttrValues kernel_attrs(const OpDesc& op, const Attrs& attrs) {
  opforge::kernels::AttrValues values;
  for (int32_t i = 0; i < op.nb_attrs; ++i) values.v[i] = static_cast<float>(attrs[i]);
  return values;
}

Inputs inputs_of(const OpDesc& op, const Tensor* const* tensors) {
  Inputs in{tensors[0]};
  if (opforge::kernels::has_residual(op)) in.r = tensors[1];
  if (opforge::kernels::has_weight(op)) in.w = tensors[op.nb_inputs - 1];
  return in;
}

ContiguousInputs::ContiguousInputs(const Inputs& in)
    : x_(torch::stable::contiguous(*in.x)),
      r_(in.r ? torch::stable::contiguous(*in.r) : x_),
      w_(in.w ? torch::stable::contiguous(*in.w) : x_),
      has_r_(in.r != nullptr),
      has_w_(in.w != nullptr) {}

Inputs ContiguousInputs::view() const { return {&x_, has_r_ ? &r_ : nullptr, has_w_ ? &w_ : nullptr}; }

void check_op(Backend backend, const OpDesc& op, const Inputs& in, const Attrs& attrs) {
  const Tensor& x = *in.x;
  for (const auto& [name, t] : named_inputs(in))
    if (t != in.x) check_same_device(op.name, name, *t, "X", x);
  check_backend_device(backend, op.name, x);
  check_dtype(backend, op.name, "X", x);
  check_x_shape(op, x);
  if (in.r != nullptr) check_residual(op, x, *in.r);
  if (in.w != nullptr) check_weight(op, x, *in.w);
  for (int32_t i = 0; i < op.nb_attrs; ++i) check_attr(*op.attrs[i], attrs[i]);
}

void check_op_backward(Backend backend, const OpDesc& op, const std::vector<Tensor>& grads,
                       const Inputs& in, const Attrs& attrs) {
  const std::vector<std::string> outputs = names_of(op.outputs);
  for (size_t i = 0; i < grads.size(); ++i) check_same_device(op.name, ("d" + outputs[i]).c_str(), grads[i], "X", *in.x);
  check_op(backend, op, in, attrs);
  const std::vector<std::vector<int64_t>> shapes = output_shapes(op, *in.x);
  for (size_t i = 0; i < grads.size(); ++i) {
    const std::string name = "d" + outputs[i];
    check_same_dtype(op.name, name.c_str(), grads[i], "X", *in.x);
    // Y keeps X's shape unless the op splits X's last axis; H always has X's shape.
    const bool own_shape = i == 0 && op.split > 1;
    check_shape(op.name, name.c_str(), grads[i], shapes[i], own_shape ? outputs[i].c_str() : "X");
  }
}

// An output of its own dtype: "dtype int8 (dtype of Q)"; one of X's dtype: as check_same_dtype.
void check_out_dtype(const OpDesc& op, const std::string& name, const Tensor& out, int32_t i,
                     ScalarType expected, const Tensor& x) {
  if (op.output_descs[i].dtype == opforge::kernels::ElemType::kLikeX && op.output_descs[i].dtype_attr < 0)
    return check_same_dtype(op.name, name.c_str(), out, "X", x);
  if (out.scalar_type() != expected)
    fail(op.name, name, "dtype " + dtype_str(expected) + " (dtype of " + op.output_descs[i].name + ")",
         dtype_str(out.scalar_type()));
}

ScalarType scalar_type_of(opforge::kernels::ElemType type, ScalarType like_x) {
  using opforge::kernels::ElemType;
  switch (type) {
    case ElemType::kFloat32: return ScalarType::Float;
    case ElemType::kInt8: return ScalarType::Char;
    case ElemType::kFloat16: return ScalarType::Half;
    case ElemType::kFloat64: return ScalarType::Double;
    case ElemType::kBFloat16: return ScalarType::BFloat16;
    case ElemType::kFloat8E4M3FN: return ScalarType::Float8_e4m3fn;
    default: return like_x;
  }
}

void check_outs(const OpDesc& op, const std::vector<Tensor>& outs, const Inputs& in, const Attrs& attrs) {
  const std::vector<std::string> outputs = names_of(op.outputs);
  const std::vector<std::vector<int64_t>> shapes = output_shapes(op, *in.x);
  const std::vector<ScalarType> dtypes = output_dtypes(op, *in.x, attrs);
  for (size_t i = 0; i < outs.size(); ++i) {
    const std::string name = out_name(op, i);
    check_same_device(op.name, name.c_str(), outs[i], "X", *in.x);
    check_out_dtype(op, name, outs[i], int32_t(i), dtypes[i], *in.x);
    check_shape(op.name, name.c_str(), outs[i], shapes[i], outputs[i].c_str());
    const auto inputs = named_inputs(in);
    for (size_t j = 0; j < inputs.size(); ++j)
      check_output_over_input(op.name, name.c_str(), outs[i], inputs[j].first, *inputs[j].second,
                              opforge::kernels::may_overwrite(op, int32_t(i), int32_t(j)));
    for (size_t j = 0; j < i; ++j) check_apart(op.name, name, outs[i], out_name(op, j), outs[j]);
  }
}

std::vector<int64_t> shape_of(const Tensor& t) {
  std::vector<int64_t> shape(t.dim());
  for (int64_t d = 0; d < t.dim(); ++d) shape[d] = t.size(d);
  return shape;
}

std::vector<std::vector<int64_t>> output_shapes(const OpDesc& op, const Tensor& x) {
  const std::vector<int64_t> x_shape = shape_of(x);
  std::vector<std::vector<int64_t>> shapes;
  for (int32_t i = 0; i < op.nb_outputs; ++i) {
    std::vector<int64_t> shape(x_shape.size());
    opforge::kernels::output_shape_at(op, i, x_shape.data(), x.dim(), shape.data());
    shapes.push_back(shape);
  }
  return shapes;
}

std::vector<ScalarType> output_dtypes(const OpDesc& op, const Tensor& x, const Attrs& attrs) {
  const opforge::kernels::AttrValues values = kernel_attrs(op, attrs);
  std::vector<ScalarType> dtypes;
  for (int32_t i = 0; i < op.nb_outputs; ++i)
    dtypes.push_back(scalar_type_of(opforge::kernels::output_elem_type(op, i, values), x.scalar_type()));
  return dtypes;
}

std::vector<Tensor> new_outputs(const OpDesc& op, const Tensor& x, const Attrs& attrs) {
  const std::vector<std::vector<int64_t>> shapes = output_shapes(op, x);
  const std::vector<ScalarType> dtypes = output_dtypes(op, x, attrs);
  std::vector<Tensor> outs;
  for (size_t i = 0; i < shapes.size(); ++i) outs.push_back(torch::stable::new_empty(x, shapes[i], dtypes[i]));
  return outs;
}

bool overlaps(const Tensor& a, const Tensor& b) {
  const Span sa = span_of(a), sb = span_of(b);
  return sa.first < sb.last && sb.first < sa.last;
}

opforge::kernels::RowView row_view(const OpDesc& op, const Tensor& x) {
  const std::vector<int64_t> shape = shape_of(x);
  return opforge::kernels::row_view(op, shape.data(), x.dim());
}

}  // namespace opforge_torch
