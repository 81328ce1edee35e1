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

enum class AttrRange { kAnyFinite, kFiniteNonNegative };

struct AttrSpec {
  const char* op;      // "Swish"
  const char* name;    // "beta"
  double default_value;
  AttrRange range;
  const char* doc;
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
};

inline const char* attr_expectation(AttrRange range) {
  return range == AttrRange::kFiniteNonNegative ? "a finite float32 >= 0" : "a finite float32";
}

inline bool attr_valid(AttrRange range, double value) {
  return finite_in_float32(value) && (range == AttrRange::kAnyFinite || value >= 0.0);
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
  if (attr_valid(attr.range, value)) return {};
  return error_text(attr.op, attr.name, attr_expectation(attr.range), format_number(value));
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

constexpr bool attrs_fit(const OpDesc* const* ops, int32_t count) {
  return count == 0 || (ops[0]->nb_attrs <= kMaxAttrs && attrs_fit(ops + 1, count - 1));
}
static_assert(attrs_fit(kOps, sizeof kOps / sizeof kOps[0]), "an op has more attributes than AttrValues holds");

// Every attribute's default, as a node without attributes gets them.
inline AttrValues default_attrs(const OpDesc& op) {
  AttrValues values;
  for (int32_t i = 0; i < op.nb_attrs; ++i) values.v[i] = static_cast<float>(op.attrs[i]->default_value);
  return values;
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
