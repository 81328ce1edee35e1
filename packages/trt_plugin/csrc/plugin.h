// IPluginV3 plugins for the opforge ops: one class for every op (its float, int and enum attributes,
// LINEAR float/half/bf16 inputs, outputs of X's type or of their own (int8, fp8, float32),
// serialization as fields), driven by the op's generated descriptor: its inputs X[, R][, W] and
// outputs (counts, input checks, each output's type and shape rule: attrs.h, shapes.h) and its CUDA
// launcher (cuda_launch.cu).
#pragma once

#include <NvInferRuntime.h>

#include <array>
#include <cstdint>

#include <opforge/kernels/attrs.h>

#include "cuda_launch.h"

namespace opforge_trt {

constexpr char kNamespace[] = "opforge";
constexpr char kPluginVersion[] = "1";
// Serialization format this build writes; it reads every format from 1 up to this one. Bump it
// (CMakeLists.txt, OPFORGE_TRT_FORMAT_VERSION) and keep reading the old fields when the serialized
// fields change, so engines built by older releases still load.
constexpr int32_t kFormatVersion = OPFORGE_TRT_FORMAT_VERSION;
constexpr char kFormatField[] = "format_version";

// The descriptors generated from opforge_spec: plugin name = ONNX op_type, its fields = the ONNX
// attributes (name, default, valid range), the inputs. constexpr: initialized before any static
// constructor (the creators in entry.cc point at them).
using OpSpec = opforge::kernels::OpDesc;

class Plugin final : public nvinfer1::IPluginV3,
               public nvinfer1::IPluginV3OneCore,
               public nvinfer1::IPluginV3OneBuild,
               public nvinfer1::IPluginV3OneRuntime {
 public:
  Plugin(const OpSpec& spec, const opforge::kernels::AttrValues& attrs) : spec_(&spec), attrs_(attrs) {}
  const opforge::kernels::AttrValues& attributes() const { return attrs_; }

  // IPluginV3
  nvinfer1::IPluginCapability* getCapabilityInterface(nvinfer1::PluginCapabilityType type) noexcept override;
  nvinfer1::IPluginV3* clone() noexcept override;

  // IPluginV3OneCore
  const char* getPluginName() const noexcept override { return spec_->name; }
  const char* getPluginVersion() const noexcept override { return kPluginVersion; }
  const char* getPluginNamespace() const noexcept override { return kNamespace; }

  // IPluginV3OneBuild
  int32_t getNbOutputs() const noexcept override { return spec_->nb_outputs; }
  int32_t getOutputDataTypes(nvinfer1::DataType* outputTypes, int32_t nbOutputs, const nvinfer1::DataType* inputTypes,
                             int32_t nbInputs) const noexcept override;
  int32_t getOutputShapes(const nvinfer1::DimsExprs* inputs, int32_t nbInputs, const nvinfer1::DimsExprs* shapeInputs,
                          int32_t nbShapeInputs, nvinfer1::DimsExprs* outputs, int32_t nbOutputs,
                          nvinfer1::IExprBuilder& exprBuilder) noexcept override;
  bool supportsFormatCombination(int32_t pos, const nvinfer1::DynamicPluginTensorDesc* inOut, int32_t nbInputs,
                                 int32_t nbOutputs) noexcept override;
  int32_t configurePlugin(const nvinfer1::DynamicPluginTensorDesc* in, int32_t nbInputs,
                          const nvinfer1::DynamicPluginTensorDesc* out, int32_t nbOutputs) noexcept override;

  // IPluginV3OneRuntime
  int32_t onShapeChange(const nvinfer1::PluginTensorDesc* in, int32_t nbInputs, const nvinfer1::PluginTensorDesc* out,
                        int32_t nbOutputs) noexcept override;
  int32_t enqueue(const nvinfer1::PluginTensorDesc* inputDesc, const nvinfer1::PluginTensorDesc* outputDesc,
                  const void* const* inputs, void* const* outputs, void* workspace,
                  cudaStream_t stream) noexcept override;
  nvinfer1::IPluginV3* attachToContext(nvinfer1::IPluginResourceContext* context) noexcept override;
  const nvinfer1::PluginFieldCollection* getFieldsToSerialize() noexcept override;

 private:
  // Checks the dims of the op's inputs (entries may be -1: unknown at build time); 0, or reports
  // and returns -1.
  int32_t check_dims(const nvinfer1::Dims* inputs) const noexcept;
  int32_t check_dims(const nvinfer1::PluginTensorDesc* inputs) const noexcept;
  int32_t check_counts(int32_t nbInputs, int32_t nbOutputs) const noexcept;
  bool is_weight(int32_t i) const noexcept;
  // Input i > 0's type rule for X's type (W: X's, or float32 with a 16-bit X; R: X's).
  bool input_type_ok(int32_t i, nvinfer1::DataType x_type, nvinfer1::DataType type) const noexcept;
  // 0, or reports why input i may not have `type` and returns -1.
  int32_t check_input_type(int32_t i, nvinfer1::DataType x_type, nvinfer1::DataType type) const noexcept;
  // Output i's type for X's type and this plugin's attributes; false: reported.
  bool output_type(int32_t i, nvinfer1::DataType x_type, nvinfer1::DataType* out) const noexcept;
  nvinfer1::DimsExprs output_dims(int32_t i, const nvinfer1::DimsExprs& x, nvinfer1::IExprBuilder& builder) const noexcept;

  const OpSpec* spec_;
  opforge::kernels::AttrValues attrs_;
  int32_t format_version_ = kFormatVersion;
  // Rebuilt by getFieldsToSerialize() from the values above: no pointer outlives a call.
  std::array<nvinfer1::PluginField, opforge::kernels::kMaxAttrs + 1> fields_{};
  std::array<int32_t, opforge::kernels::kMaxAttrs> int_values_{};  // int and enum attributes' storage
  nvinfer1::PluginFieldCollection field_collection_{};
};

// One creator per op. getFieldNames() declares the op's attributes only (what TensorRT's ONNX
// parser maps node attributes onto); createPlugin() also reads format_version from serialized fields.
// Build phase (ONNX node attributes): a missing attribute takes its default, unknown fields are
// ignored with a warning. Runtime phase (an engine's serialized state): exactly the fields
// getFieldsToSerialize() writes, each once, or nothing is created.
class Creator final : public nvinfer1::IPluginCreatorV3One {
 public:
  explicit Creator(const OpSpec& spec);
  nvinfer1::IPluginV3* createPlugin(const char* name, const nvinfer1::PluginFieldCollection* fc,
                                    nvinfer1::TensorRTPhase phase) noexcept override;
  const nvinfer1::PluginFieldCollection* getFieldNames() noexcept override { return &field_names_; }
  const char* getPluginName() const noexcept override { return spec_->name; }
  const char* getPluginVersion() const noexcept override { return kPluginVersion; }
  const char* getPluginNamespace() const noexcept override { return kNamespace; }

 private:
  const OpSpec* spec_;
  opforge::kernels::AttrValues defaults_;  // getFieldNames() points at them
  std::array<int32_t, opforge::kernels::kMaxAttrs> int_defaults_{};  // an int or enum attribute's
  std::array<nvinfer1::PluginField, opforge::kernels::kMaxAttrs> fields_{};
  nvinfer1::PluginFieldCollection field_names_{};
};

}  // namespace opforge_trt
