// The attribute rule every opforge layer applies (torch, ONNX Runtime, TensorRT, loader plugins),
// with the canonical error text, and the op descriptors generated from the spec. Host-only. The Python twin is opforge_spec.ops (Attr.check,
// error, format_number); kernels/tests checks that both give the same verdict and message.
//
// Attributes are float32 (ONNX AttributeProto.f and every kernel), but torch and TensorRT hand
// them over as doubles: a value is valid only if it stays finite once rounded to float32.
// Checking the double alone let beta=1e39 through as inf, and casting first is undefined
// behaviour for out-of-range doubles, so the rule compares against the rounding boundary.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

namespace opforge::kernels {

// 2^128 - 2^103: the midpoint between FLT_MAX and 2^128. Round-to-nearest-even sends it (and
// everything above) to inf, everything below to a finite float.
inline constexpr double kFloat32Overflow = 3.4028235677973366e38;

inline bool finite_in_float32(double value) { return std::fabs(value) < kFloat32Overflow; }

// Float attributes: finite (>= 0); integer ones (int and enum attributes): |value| <= kIntLimit,
// exact in the float32 the kernels take them as; an enum's value is one of its choices.
enum class AttrRange { kAnyFinite, kFiniteNonNegative, kInteger, kNonNegativeInteger, kOneOf };
enum class AttrType { kFloat, kInt, kEnum };
inline constexpr double kIntLimit = 16777216.0;  // 2^24 (opforge_spec INT_LIMIT)

// One value of an enum attribute: its name in messages and docs, its value in every layer.
struct AttrChoice {
  const char* name;  // "int8"
  int32_t value;     // 3
};

struct AttrSpec {
  const char* op;      // "Swish"
  const char* name;    // "beta"
  double default_value;
  AttrRange range;
  const char* doc;
  AttrType type = AttrType::kFloat;  // how the layers declare it: float, or int (int, enum)
  int32_t nb_choices = 0;            // an enum's values
  const AttrChoice* choices = nullptr;
};

// Element types by their ONNX TensorProto.DataType code (opforge_spec DTYPE_CODES); kLikeX: X's.
// An enum attribute that picks an output's dtype takes these codes as its values.
enum class ElemType : int32_t { kLikeX = 0, kFloat32 = 1, kInt8 = 3, kFloat16 = 10, kFloat64 = 11,
                                kBFloat16 = 16, kFloat8E4M3FN = 17 };

// The dtype's name in messages (numpy's names, opforge_spec's for the float types) for any ONNX
// TensorProto code a layer meets, not only ElemType's; "" for kLikeX and codes without one.
inline const char* elem_type_name(ElemType t) {
  switch (static_cast<int32_t>(t)) {
    case 1: return "float32";
    case 2: return "uint8";
    case 3: return "int8";
    case 4: return "uint16";
    case 5: return "int16";
    case 6: return "int32";
    case 7: return "int64";
    case 9: return "bool";
    case 10: return "float16";
    case 11: return "float64";
    case 12: return "uint32";
    case 13: return "uint64";
    case 16: return "bfloat16";
    case 17: return "float8_e4m3fn";
    default: return "";
  }
}

// An output's shape: kSplit the op's rule (X's shape, the last dim divided by split), kLikeX X's
// shape, kRow X's shape with the last dim 1 (one value per row).
enum class OutShape { kSplit, kLikeX, kRow };

// One output of an op: its name, its element type (fixed, or kLikeX) or the index of the enum
// attribute that picks it (dtype_attr >= 0: the attribute's value is an ElemType code), its shape.
struct OutputDesc {
  const char* name;
  ElemType dtype;
  int32_t dtype_attr;  // -1: `dtype` holds
  OutShape shape;
};

// How a kernel sees X: every element alike, or rows of X's last axis (then W, when the op has a
// second input, is a 1-D per-column weight).
enum class Layout { kElementwise, kRows };

struct OpDesc {
  const char* name;        // ONNX op_type, TensorRT plugin name
  const char* torch_name;  // torch.ops.opforge.<torch_name>
  int32_t nb_inputs;
  const char* inputs;      // for messages: "X" / "X, W"
  const AttrSpec* attr;    // the op's first float attribute (the layers' one), or nullptr
  const char* doc;
  Layout layout;
  int32_t split;           // > 1: X's last axis holds `split` equal parts, Y's last axis is one part
  const char* x_expected;  // X's shape rule in messages when split > 1
  int32_t nb_attrs;
  const AttrSpec* const* attrs;  // nb_attrs of them (nullptr for none); attr is the first
  int32_t nb_outputs;
  const char* outputs;     // for messages: "Y" / "Y, H"
  // What an .out overload may write over (OpSpec.overwrites): bit output * nb_inputs + input set
  // when that output may be that input itself (may_overwrite in shapes.h).
  uint32_t overwrites = 0;
  // Each output's dtype and shape rule (nb_outputs of them, descriptor order).
  const OutputDesc* output_descs = nullptr;
  // false: an inference op with no derivative (no backward kernels, no backward schema).
  bool has_gradient = true;
};

inline const char* attr_expectation(AttrRange range) {
  switch (range) {
    case AttrRange::kFiniteNonNegative: return "a finite float32 >= 0";
    case AttrRange::kInteger: return "an integer in [-16777216, 16777216]";
    case AttrRange::kNonNegativeInteger: return "an integer in [0, 16777216]";
    default: return "a finite float32";
  }
}

inline bool attr_valid(AttrRange range, double value) {
  const bool integral = std::fabs(value) <= kIntLimit && std::floor(value) == value;
  switch (range) {
    case AttrRange::kAnyFinite: return finite_in_float32(value);
    case AttrRange::kFiniteNonNegative: return finite_in_float32(value) && value >= 0.0;
    case AttrRange::kInteger: return integral;
    case AttrRange::kNonNegativeInteger: return integral && value >= 0.0;
    default: return false;  // kOneOf: attr_valid(AttrSpec, value)
  }
}

inline bool attr_valid(const AttrSpec& attr, double value) {
  if (attr.range != AttrRange::kOneOf) return attr_valid(attr.range, value);
  for (int32_t i = 0; i < attr.nb_choices; ++i)
    if (value == attr.choices[i].value) return true;
  return false;
}

// "one of 3 (int8), 17 (float8_e4m3fn)" (opforge_spec one_of_text)
inline std::string choices_text(const AttrSpec& attr) {
  std::string text = "one of ";
  for (int32_t i = 0; i < attr.nb_choices; ++i)
    text += (i ? ", " : "") + std::to_string(attr.choices[i].value) + " (" + attr.choices[i].name + ")";
  return text;
}

// Shortest form that round-trips a float32 ("%.9g"); opforge_spec.format_number matches it
// (Python prints every NaN as "nan", glibc a sign-bit NaN as "-nan").
inline std::string format_number(double value) {
  if (std::isnan(value)) return "nan";
  char text[40];
  std::snprintf(text, sizeof text, "%.9g", value);
  return text;
}

inline std::string error_text(const std::string& op, const std::string& what,
                              const std::string& expected, const std::string& got) {
  return "opforge." + op + ": " + what + ": expected " + expected + ", got " + got;
}

// Empty when `value` is valid for `attr`, else the canonical error text.
inline std::string attr_error(const AttrSpec& attr, double value) {
  if (attr_valid(attr, value)) return {};
  const std::string expected = attr.range == AttrRange::kOneOf ? choices_text(attr) : attr_expectation(attr.range);
  return error_text(attr.op, attr.name, expected, format_number(value));
}

// An op's attribute values as its kernels take them (float32), in the descriptor's order.
inline constexpr int32_t kMaxAttrs = 4;

struct AttrValues {
  float v[kMaxAttrs] = {};
  constexpr float operator[](int32_t i) const { return v[i]; }
};

}  // namespace opforge::kernels

// kSwishBeta, kSwishOp, ...: the descriptors generated from opforge_spec.
#include "opforge/kernels/ops_generated.h"

namespace opforge::kernels {

// The most outputs an op has: the layers' per-call output pointer arrays (Forward::outputs) hold this many.
inline constexpr int32_t kMaxOutputs = 3;

// Whether `fits` holds for every op's descriptor.
template <class Fits>
constexpr bool every_op(Fits fits) {
  for (const OpDesc* op : kOps)
    if (!fits(*op)) return false;
  return true;
}
static_assert(every_op([](const OpDesc& op) { return op.nb_attrs <= kMaxAttrs; }),
              "an op has more attributes than AttrValues holds");
static_assert(every_op([](const OpDesc& op) { return op.nb_outputs <= kMaxOutputs; }),
              "an op has more outputs than kMaxOutputs");

// Every attribute's default, as a node without attributes gets them.
inline AttrValues default_attrs(const OpDesc& op) {
  AttrValues values;
  for (int32_t i = 0; i < op.nb_attrs; ++i) values.v[i] = static_cast<float>(op.attrs[i]->default_value);
  return values;
}

// The element type of output `i` for the call's attribute values (kLikeX: X's).
inline ElemType output_elem_type(const OpDesc& op, int32_t i, const AttrValues& attrs) {
  const OutputDesc& out = op.output_descs[i];
  return out.dtype_attr >= 0 ? static_cast<ElemType>(static_cast<int32_t>(attrs[out.dtype_attr])) : out.dtype;
}

// Empty when every value is valid for its attribute, else the first canonical error text.
inline std::string attrs_error(const OpDesc& op, const double* values) {
  for (int32_t i = 0; i < op.nb_attrs; ++i) {
    std::string error = attr_error(*op.attrs[i], values[i]);
    if (!error.empty()) return error;
  }
  return {};
}

}  // namespace opforge::kernels
