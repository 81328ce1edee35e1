#include <cmath>
#include <cstring>
#include <new>
#include <string>

#include "log.h"
#include "plugin.h"

namespace opforge_trt {

using nvinfer1::PluginField;
using nvinfer1::PluginFieldType;

namespace {

std::string field_str(const PluginField& f) {
  static const char* const kNames[] = {"float16", "float32", "float64", "int8", "int16", "int32", "char",
                                       "dims",    "unknown", "bfloat16", "int64", "fp8", "int4", "fp4"};
  const auto t = static_cast<int32_t>(f.type);
  const std::string type = t >= 0 && t < 14 ? kNames[t] : "type " + std::to_string(t);
  return std::to_string(f.length) + " " + type + " value(s)";
}

bool read_attribute(const OpSpec& spec, const PluginField& f, float* value) {
  if (f.data != nullptr && f.length == 1 && f.type == PluginFieldType::kFLOAT32) {
    std::memcpy(value, f.data, sizeof(float));
    return true;
  }
  if (f.data != nullptr && f.length == 1 && f.type == PluginFieldType::kFLOAT64) {
    double d;
    std::memcpy(&d, f.data, sizeof d);
    *value = static_cast<float>(d);
    return true;
  }
  report(spec.name, spec.attr, "one float32 value", field_str(f));
  return false;
}

bool read_format_version(const OpSpec& spec, const PluginField& f) {
  int32_t version = 0;
  if (f.data == nullptr || f.length != 1 || f.type != PluginFieldType::kINT32) {
    report(spec.name, kFormatField, "one int32 value", field_str(f));
    return false;
  }
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

bool attribute_valid(const OpSpec& spec, float value) {
  if (std::isfinite(value) && !(spec.attr_nonnegative && value < 0.0f)) return true;
  report(spec.name, spec.attr, spec.attr_nonnegative ? "a finite float >= 0" : "a finite float", float_str(value));
  return false;
}

// The op's attribute (default when absent) from build-time fields (ONNX node attributes) or
// serialized fields (getFieldsToSerialize of an earlier build). false: reported.
bool read_fields(const OpSpec& spec, const nvinfer1::PluginFieldCollection* fc, float* attr) {
  *attr = spec.attr_default;
  const int32_t n = fc != nullptr && fc->fields != nullptr ? fc->nbFields : 0;
  for (int32_t i = 0; i < n; ++i) {
    const PluginField& f = fc->fields[i];
    if (f.name == nullptr) continue;
    if (std::strcmp(f.name, spec.attr) == 0) {
      if (!read_attribute(spec, f, attr)) return false;
    } else if (std::strcmp(f.name, kFormatField) == 0) {
      if (!read_format_version(spec, f)) return false;
    } else {
      log(nvinfer1::ILogger::Severity::kWARNING,
          std::string("opforge.") + spec.name + ": ignoring unknown plugin field '" + f.name + "'");
    }
  }
  return attribute_valid(spec, *attr);
}

}  // namespace

Creator::Creator(const OpSpec& spec)
    : spec_(&spec), field_(spec.attr, &spec.attr_default, PluginFieldType::kFLOAT32, 1), field_names_{1, &field_} {}

nvinfer1::IPluginV3* Creator::createPlugin(const char*, const nvinfer1::PluginFieldCollection* fc,
                                           nvinfer1::TensorRTPhase) noexcept {
  try {
    float attr = 0.0f;
    if (!read_fields(*spec_, fc, &attr)) return nullptr;
    if (spec_ == &kSwish) return new (std::nothrow) SwishPlugin(attr);
    return new (std::nothrow) RMSNormPlugin(attr);
  } catch (...) {  // std::string allocation in a message: never let it cross into TensorRT
    return nullptr;
  }
}

}  // namespace opforge_trt
