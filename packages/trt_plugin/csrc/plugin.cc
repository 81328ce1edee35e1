#include "plugin.h"

#include <cmath>
#include <cstring>
#include <new>
#include <string>

#include "log.h"

namespace opforge_trt {

using nvinfer1::DataType;
using nvinfer1::Dims;
using nvinfer1::PluginField;
using nvinfer1::PluginFieldType;
using nvinfer1::TensorFormat;

namespace {

bool to_element(DataType type, cuda::Element* out) {
  switch (type) {
    case DataType::kFLOAT: *out = cuda::Element::kFloat; return true;
    case DataType::kHALF: *out = cuda::Element::kHalf; return true;
    case DataType::kBF16: *out = cuda::Element::kBFloat16; return true;
    default: return false;
  }
}

std::string type_name(DataType type) {
  switch (type) {
    case DataType::kFLOAT: return "float32";
    case DataType::kHALF: return "float16";
    case DataType::kBF16: return "bfloat16";
    case DataType::kINT8: return "int8";
    case DataType::kINT32: return "int32";
    case DataType::kINT64: return "int64";
    case DataType::kBOOL: return "bool";
    case DataType::kUINT8: return "uint8";
    case DataType::kFP8: return "fp8";
    default: return "DataType(" + std::to_string(static_cast<int>(type)) + ")";
  }
}

constexpr char kSupportedTypes[] = "float32, float16 or bfloat16 tensor";

int64_t volume(const Dims& dims) {
  int64_t n = 1;
  for (int32_t i = 0; i < dims.nbDims; ++i) n *= dims.d[i];
  return n;
}

}  // namespace

// ---- IPluginV3 ------------------------------------------------------------------------------

nvinfer1::IPluginCapability* Plugin::getCapabilityInterface(nvinfer1::PluginCapabilityType type) noexcept {
  switch (type) {
    case nvinfer1::PluginCapabilityType::kCORE: return static_cast<nvinfer1::IPluginV3OneCore*>(this);
    case nvinfer1::PluginCapabilityType::kBUILD: return static_cast<nvinfer1::IPluginV3OneBuild*>(this);
    case nvinfer1::PluginCapabilityType::kRUNTIME: return static_cast<nvinfer1::IPluginV3OneRuntime*>(this);
  }
  return nullptr;
}

nvinfer1::IPluginV3* Plugin::clone() noexcept { return copy(); }

nvinfer1::IPluginV3* Plugin::attachToContext(nvinfer1::IPluginResourceContext*) noexcept {
  // Each execution context gets its own plugin object; the plugin holds no per-context resources.
  return copy();
}

// ---- build ----------------------------------------------------------------------------------

int32_t Plugin::check_counts(int32_t nbInputs, int32_t nbOutputs) const noexcept {
  if (nbInputs != spec_->nb_inputs) {
    report(spec_->name, "inputs", std::to_string(spec_->nb_inputs) + " (" + spec_->inputs + ")",
           std::to_string(nbInputs));
    return -1;
  }
  if (nbOutputs != 1) {
    report(spec_->name, "outputs", "1 (Y)", std::to_string(nbOutputs));
    return -1;
  }
  return 0;
}

int32_t Plugin::getOutputDataTypes(DataType* outputTypes, int32_t nbOutputs, const DataType* inputTypes,
                                   int32_t nbInputs) const noexcept {
  if (check_counts(nbInputs, nbOutputs) != 0) return -1;
  cuda::Element element;
  if (!to_element(inputTypes[0], &element)) {
    report(spec_->name, "X", kSupportedTypes, type_name(inputTypes[0]) + " tensor");
    return -1;
  }
  for (int32_t i = 1; i < nbInputs; ++i) {
    if (inputTypes[i] != inputTypes[0]) {
      report(spec_->name, "W", type_name(inputTypes[0]) + " tensor (same type as X)",
             type_name(inputTypes[i]) + " tensor");
      return -1;
    }
  }
  outputTypes[0] = inputTypes[0];
  return 0;
}

int32_t Plugin::getOutputShapes(const nvinfer1::DimsExprs* inputs, int32_t nbInputs, const nvinfer1::DimsExprs*,
                                int32_t, nvinfer1::DimsExprs* outputs, int32_t nbOutputs,
                                nvinfer1::IExprBuilder& builder) noexcept {
  // A pure function of the input dims. Constant extents are checked too.
  if (check_counts(nbInputs, nbOutputs) != 0) return -1;
  Dims known[2]{};
  for (int32_t i = 0; i < nbInputs; ++i) {
    known[i].nbDims = inputs[i].nbDims;
    for (int32_t k = 0; k < inputs[i].nbDims; ++k) {
      const nvinfer1::IDimensionExpr* e = inputs[i].d[k];
      known[i].d[k] = (e != nullptr && e->isConstant()) ? e->getConstantValue() : -1;
    }
  }
  if (check_dims(known) != 0) return -1;
  output_dims(inputs[0], outputs[0], builder);
  return 0;
}

void Plugin::output_dims(const nvinfer1::DimsExprs& x, nvinfer1::DimsExprs& y, nvinfer1::IExprBuilder&) const noexcept {
  y = x;
}

bool Plugin::supportsFormatCombination(int32_t pos, const nvinfer1::DynamicPluginTensorDesc* inOut, int32_t nbInputs,
                                       int32_t nbOutputs) noexcept {
  if (pos < 0 || pos >= nbInputs + nbOutputs) return false;
  const nvinfer1::PluginTensorDesc& desc = inOut[pos].desc;
  cuda::Element element;
  if (desc.format != TensorFormat::kLINEAR || !to_element(desc.type, &element)) return false;
  return pos == 0 || desc.type == inOut[0].desc.type;  // W and Y take X's type
}

int32_t Plugin::configurePlugin(const nvinfer1::DynamicPluginTensorDesc* in, int32_t nbInputs,
                                const nvinfer1::DynamicPluginTensorDesc*, int32_t nbOutputs) noexcept {
  if (check_counts(nbInputs, nbOutputs) != 0) return -1;
  Dims dims[2]{};
  for (int32_t i = 0; i < nbInputs; ++i) dims[i] = in[i].desc.dims;
  return check_dims(dims);
}

// ---- runtime --------------------------------------------------------------------------------

int32_t Plugin::onShapeChange(const nvinfer1::PluginTensorDesc* in, int32_t nbInputs,
                              const nvinfer1::PluginTensorDesc*, int32_t nbOutputs) noexcept {
  if (check_counts(nbInputs, nbOutputs) != 0) return -1;
  Dims dims[2]{};
  for (int32_t i = 0; i < nbInputs; ++i) dims[i] = in[i].dims;
  return check_dims(dims);
}

int32_t Plugin::enqueue(const nvinfer1::PluginTensorDesc* inputDesc, const nvinfer1::PluginTensorDesc*,
                        const void* const* inputs, void* const* outputs, void*, cudaStream_t stream) noexcept {
  cuda::Element element;
  if (!to_element(inputDesc[0].type, &element)) {
    report(spec_->name, "X", kSupportedTypes, type_name(inputDesc[0].type) + " tensor");
    return -1;
  }
  const cudaError_t status = launch(element, inputDesc, inputs, outputs[0], stream);
  if (status != cudaSuccess) {
    report(spec_->name, "CUDA kernel launch", "cudaSuccess",
           std::string(cudaGetErrorName(status)) + " (" + cudaGetErrorString(status) + ")");
    return -1;
  }
  return 0;
}

const nvinfer1::PluginFieldCollection* Plugin::getFieldsToSerialize() noexcept {
  fields_[0] = PluginField(spec_->attr->name, &attr_, PluginFieldType::kFLOAT32, 1);
  fields_[1] = PluginField(kFormatField, &format_version_, PluginFieldType::kINT32, 1);
  field_collection_.nbFields = static_cast<int32_t>(fields_.size());
  field_collection_.fields = fields_.data();
  return &field_collection_;
}

// ---- Swish ----------------------------------------------------------------------------------

int32_t SwishPlugin::check_dims(const Dims*) const noexcept { return 0; }  // any shape, empty too

cudaError_t SwishPlugin::launch(cuda::Element type, const nvinfer1::PluginTensorDesc* inputDesc,
                                const void* const* inputs, void* output, cudaStream_t stream) const noexcept {
  return cuda::swish(type, inputs[0], output, volume(inputDesc[0].dims), attribute(), stream);
}

Plugin* SwishPlugin::copy() const noexcept { return new (std::nothrow) SwishPlugin(attribute()); }

// ---- RMSNorm --------------------------------------------------------------------------------

int32_t RMSNormPlugin::check_dims(const Dims* inputs) const noexcept {
  const Dims& x = inputs[0];
  const Dims& w = inputs[1];
  if (x.nbDims < 1) {
    report(spec().name, "X", opforge::kernels::kRankAtLeast1, "a rank-0 tensor (scalar)");
    return -1;
  }
  const int64_t cols = x.d[x.nbDims - 1];
  const bool length_known = cols >= 0 && w.nbDims == 1 && w.d[0] >= 0;
  if (w.nbDims != 1 || (length_known && w.d[0] != cols)) {
    const std::string expected =
        cols >= 0 ? opforge::kernels::kRMSNormWeightExpected + std::to_string(cols) + opforge::kernels::kRMSNormWeightSuffix
                  : std::string("1-D tensor (length = last dim of X)");
    report(spec().name, "W", expected, "shape " + dims_str(w));
    return -1;
  }
  return 0;
}

cudaError_t RMSNormPlugin::launch(cuda::Element type, const nvinfer1::PluginTensorDesc* inputDesc,
                                  const void* const* inputs, void* output, cudaStream_t stream) const noexcept {
  const Dims& x = inputDesc[0].dims;
  const int64_t cols = x.d[x.nbDims - 1];
  const int64_t n = volume(x);
  if (n == 0) return cudaSuccess;  // empty X (cols may be 0): nothing to do
  return cuda::rms_norm(type, inputs[0], inputs[1], output, n / cols, cols, attribute(), stream);
}

Plugin* RMSNormPlugin::copy() const noexcept { return new (std::nothrow) RMSNormPlugin(attribute()); }

// ---- SwiGLU ---------------------------------------------------------------------------------

int32_t SwiGLUPlugin::check_dims(const Dims* inputs) const noexcept {
  const Dims& x = inputs[0];
  const int64_t last = x.nbDims >= 1 ? x.d[x.nbDims - 1] : 0;
  // -1: not known at build time, checked again with the real dims in configurePlugin/onShapeChange
  if (x.nbDims < 1 || (last != -1 && (last < 2 || last % 2 != 0))) {
    report(spec().name, "X", opforge::kernels::kSwiGLUXExpected, x.nbDims < 1 ? "rank 0" : "shape " + dims_str(x));
    return -1;
  }
  return 0;
}

void SwiGLUPlugin::output_dims(const nvinfer1::DimsExprs& x, nvinfer1::DimsExprs& y,
                               nvinfer1::IExprBuilder& builder) const noexcept {
  y = x;
  const int32_t last = x.nbDims - 1;
  y.d[last] = builder.operation(nvinfer1::DimensionOperation::kFLOOR_DIV, *x.d[last], *builder.constant(2));
}

cudaError_t SwiGLUPlugin::launch(cuda::Element type, const nvinfer1::PluginTensorDesc* inputDesc,
                                 const void* const* inputs, void* output, cudaStream_t stream) const noexcept {
  const Dims& x = inputDesc[0].dims;
  const int64_t cols = x.d[x.nbDims - 1];
  const int64_t n = volume(x);
  if (n == 0) return cudaSuccess;
  return cuda::swiglu(type, inputs[0], output, n / cols, cols / 2, attribute(), stream);
}

Plugin* SwiGLUPlugin::copy() const noexcept { return new (std::nothrow) SwiGLUPlugin(attribute()); }

}  // namespace opforge_trt
