// createPlugin: the plugin's attribute from a PluginFieldCollection, which comes from outside:
// the ONNX parser's node attributes (build phase) or an engine file's serialized state (runtime
// phase). Nothing in it is trusted: counts, pointers, names, types and lengths are all checked,
// and every refusal is one canonical message through the logger plus a nullptr.
#include <cstdio>
#include <cstring>
#include <new>
#include <string>

#include "log.h"
#include "plugin.h"

namespace opforge_trt {

using nvinfer1::PluginField;
using nvinfer1::PluginFieldCollection;
using nvinfer1::PluginFieldType;
namespace kernels = opforge::kernels;

namespace {

constexpr char kFields[] = "plugin fields";
constexpr size_t kMaxNameShown = 64;

// A field name as it may appear in a message: printable ASCII, the rest escaped, bounded.
std::string printable(const char* name) {
  std::string out = "'";
  size_t i = 0;
  for (; name[i] != '\0' && i < kMaxNameShown; ++i) {
    const auto c = static_cast<unsigned char>(name[i]);
    if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char escaped[5];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", c);
      out += escaped;
    }
  }
  return out + (name[i] != '\0' ? "'..." : "'");
}

std::string type_name(PluginFieldType type) {
  static const char* const kNames[] = {"float16", "float32", "float64", "int8", "int16", "int32", "char",
                                       "dims",    "unknown", "bfloat16", "int64", "fp8", "int4", "fp4"};
  const auto t = static_cast<int32_t>(type);
  return t >= 0 && t < static_cast<int32_t>(sizeof kNames / sizeof kNames[0]) ? kNames[t]
                                                                               : "type " + std::to_string(t);
}

std::string describe(const PluginField& f) {
  if (f.data == nullptr) return std::to_string(f.length) + " " + type_name(f.type) + " value(s) at data = NULL";
  return std::to_string(f.length) + " " + type_name(f.type) + " value(s)";
}

// The fields createPlugin understands, found once each.
struct Found {
  const PluginField* attrs[kernels::kMaxAttrs] = {};
  const PluginField* format = nullptr;
  int32_t attr_index[kernels::kMaxAttrs] = {};
  int32_t format_index = -1;
};

bool is_float(const kernels::AttrSpec& attr) { return attr.type == kernels::AttrType::kFloat; }

// The field type an attribute is written as: float32, or int32 for an int or enum attribute.
const char* field_type_name(const kernels::AttrSpec& attr) { return is_float(attr) ? "float32" : "int32"; }

std::string expected_serialized(const OpSpec& spec) {
  std::string text;
  for (int32_t i = 0; i < spec.nb_attrs; ++i)
    text += std::string("one ") + spec.attrs[i]->name + " (" + field_type_name(*spec.attrs[i]) + "[1]) and ";
  return text + "one " + kFormatField + " (int32[1])";
}

// The index of the op's attribute named `name`, or -1.
int32_t attr_index_of(const OpSpec& spec, const char* name) {
  for (int32_t i = 0; i < spec.nb_attrs; ++i)
    if (std::strcmp(name, spec.attrs[i]->name) == 0) return i;
  return -1;
}

// Points `slot` at field i unless a field of that name came before. false: reported.
bool take_once(const OpSpec& spec, const PluginField& f, int32_t i, const PluginField** slot, int32_t* index) {
  if (*slot != nullptr) {
    report(spec.name, f.name, "exactly one field named " + std::string(f.name),
           "a repeated field (fields " + std::to_string(*index) + " and " + std::to_string(i) + ")");
    return false;
  }
  *slot = &f;
  *index = i;
  return true;
}

bool is_unknown_allowed(const OpSpec& spec, const PluginField& f, bool serialized) {
  if (serialized) {  // our own state holds nothing else: another field means another writer
    report(spec.name, "plugin field " + printable(f.name), expected_serialized(spec) + " (serialized state)",
           "an unknown field");
    return false;
  }
  log(nvinfer1::ILogger::Severity::kWARNING,
      std::string("opforge.") + spec.name + ": ignoring unknown plugin field " + printable(f.name));
  return true;
}

// Checks the collection's shape and finds the known fields. false: reported.
bool find_fields(const OpSpec& spec, const PluginFieldCollection* fc, bool serialized, Found* found) {
  if (fc == nullptr) {
    if (!serialized) return true;  // no attributes at all: every default
    report(spec.name, kFields, expected_serialized(spec), "no field collection (NULL)");
    return false;
  }
  if (fc->nbFields < 0) {
    report(spec.name, kFields, "nbFields >= 0", "nbFields = " + std::to_string(fc->nbFields));
    return false;
  }
  if (fc->nbFields > 0 && fc->fields == nullptr) {
    report(spec.name, kFields, "an array of " + std::to_string(fc->nbFields) + " fields", "fields = NULL");
    return false;
  }
  for (int32_t i = 0; i < fc->nbFields; ++i) {
    const PluginField& f = fc->fields[i];
    if (f.name == nullptr) {
      report(spec.name, "plugin field " + std::to_string(i), "a named field", "name = NULL");
      return false;
    }
    bool ok = true;
    if (const int32_t a = attr_index_of(spec, f.name); a >= 0) {
      ok = take_once(spec, f, i, &found->attrs[a], &found->attr_index[a]);
    } else if (std::strcmp(f.name, kFormatField) == 0) {
      ok = take_once(spec, f, i, &found->format, &found->format_index);
    } else {
      ok = is_unknown_allowed(spec, f, serialized);
    }
    if (!ok) return false;
  }
  return true;
}

// An absent field: fine at build time (the default), a truncated state at runtime. false: reported.
bool is_absence_allowed(const OpSpec& spec, const char* name, const char* type, bool serialized) {
  if (!serialized) return true;
  report(spec.name, name,
         std::string("one serialized ") + type + " field (the engine's plugin state is incomplete: rebuild the engine)",
         "none");
  return false;
}

bool read_format_version(const OpSpec& spec, const PluginField& f) {
  if (f.data == nullptr || f.length != 1 || f.type != PluginFieldType::kINT32) {
    report(spec.name, kFormatField, "one int32 value", describe(f));
    return false;
  }
  int32_t version = 0;
  std::memcpy(&version, f.data, sizeof version);
  if (version < 1 || version > kFormatVersion) {
    report(spec.name, kFormatField,
           "a serialization format from 1 to " + std::to_string(kFormatVersion) +
               " (the engine was built by a newer opforge-trt: install it, or rebuild the engine)",
           std::to_string(version));
    return false;
  }
  return true;
}

// An int or enum attribute: int32 is what we write (and TensorRT's ONNX parser gives for an INT
// attribute); int64 is accepted and checked as the integer it is.
bool read_int_attribute(const OpSpec& spec, const kernels::AttrSpec& attr, const PluginField& f, double* value) {
  if (f.data != nullptr && f.length == 1 && f.type == PluginFieldType::kINT32) {
    int32_t v;
    std::memcpy(&v, f.data, sizeof v);
    *value = v;
    return true;
  }
  if (f.data != nullptr && f.length == 1 && f.type == PluginFieldType::kINT64) {
    int64_t v;
    std::memcpy(&v, f.data, sizeof v);
    *value = static_cast<double>(v);
    return true;
  }
  report(spec.name, attr.name, "one int32 value", describe(f));
  return false;
}

// float32 is what we write; float64 is accepted and checked as the double it is, so a value
// beyond float32's range is reported as itself (1e+300), not as the inf it would round to.
bool read_attribute(const OpSpec& spec, const kernels::AttrSpec& attr, const PluginField& f, double* value) {
  if (!is_float(attr)) return read_int_attribute(spec, attr, f, value);
  if (f.data != nullptr && f.length == 1 && f.type == PluginFieldType::kFLOAT32) {
    float v;
    std::memcpy(&v, f.data, sizeof v);
    *value = v;
    return true;
  }
  if (f.data != nullptr && f.length == 1 && f.type == PluginFieldType::kFLOAT64) {
    std::memcpy(value, f.data, sizeof *value);
    return true;
  }
  report(spec.name, attr.name, "one float32 value", describe(f));
  return false;
}

// Attribute `attr` from its field (or its default), checked by the shared rule. false: reported.
bool read_attr_field(const OpSpec& spec, const kernels::AttrSpec& attr, const PluginField* field, bool serialized,
                     float* out) {
  double value = attr.default_value;
  const bool found_ok = field != nullptr ? read_attribute(spec, attr, *field, &value)
                                         : is_absence_allowed(spec, attr.name, field_type_name(attr), serialized);
  if (!found_ok) return false;
  const std::string error = kernels::attr_error(attr, value);
  if (!error.empty()) {
    log(nvinfer1::ILogger::Severity::kERROR, error);
    return false;
  }
  *out = static_cast<float>(value);  // finite in float32: the rule above guarantees the cast is defined
  return true;
}

// The op's attributes from the fields, by the rules of the phase. false: reported.
bool read_fields(const OpSpec& spec, const PluginFieldCollection* fc, bool serialized, kernels::AttrValues* attrs) {
  Found found;
  if (!find_fields(spec, fc, serialized, &found)) return false;
  const bool format_ok = found.format != nullptr ? read_format_version(spec, *found.format)
                                                 : is_absence_allowed(spec, kFormatField, "int32", serialized);
  if (!format_ok) return false;
  for (int32_t i = 0; i < spec.nb_attrs; ++i)
    if (!read_attr_field(spec, *spec.attrs[i], found.attrs[i], serialized, &attrs->v[i])) return false;
  return true;
}

}  // namespace

Creator::Creator(const OpSpec& spec)
    : spec_(&spec),
      defaults_(kernels::default_attrs(spec)),
      field_names_{spec.nb_attrs, fields_.data()} {
  for (int32_t i = 0; i < spec.nb_attrs; ++i) {
    if (is_float(*spec.attrs[i])) {
      fields_[i] = PluginField(spec.attrs[i]->name, &defaults_.v[i], PluginFieldType::kFLOAT32, 1);
    } else {
      int_defaults_[i] = static_cast<int32_t>(defaults_.v[i]);
      fields_[i] = PluginField(spec.attrs[i]->name, &int_defaults_[i], PluginFieldType::kINT32, 1);
    }
  }
}

nvinfer1::IPluginV3* Creator::createPlugin(const char*, const PluginFieldCollection* fc,
                                           nvinfer1::TensorRTPhase phase) noexcept {
  try {
    // Anything but the build phase rebuilds a plugin from state we wrote: the strict rules.
    const bool serialized = phase != nvinfer1::TensorRTPhase::kBUILD;
    kernels::AttrValues attrs;
    if (!read_fields(*spec_, fc, serialized, &attrs)) return nullptr;
    return new (std::nothrow) Plugin(*spec_, attrs);
  } catch (...) {  // std::string allocation in a message: never let it cross into TensorRT
    return nullptr;
  }
}

}  // namespace opforge_trt
