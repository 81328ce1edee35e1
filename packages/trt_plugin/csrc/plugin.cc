#include "plugin.h"

#include <cmath>
#include <cstring>
#include <new>
#include <string>

#include <opforge/kernels/shapes.h>

#include "log.h"

namespace opforge_trt {

using nvinfer1::DataType;
using nvinfer1::Dims;
using nvinfer1::PluginField;
using nvinfer1::PluginFieldType;
using nvinfer1::TensorFormat;
namespace kernels = opforge::kernels;

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

// A TensorRT type as its ONNX element type (attrs.h ElemType: ONNX TensorProto codes), for the
// shared dtype rules (shapes.h weight_dtype_error).
kernels::ElemType to_elem_type(DataType type) {
  switch (type) {
    case DataType::kFLOAT: return kernels::ElemType::kFloat32;
    case DataType::kHALF: return kernels::ElemType::kFloat16;
    case DataType::kBF16: return kernels::ElemType::kBFloat16;
    case DataType::kINT8: return kernels::ElemType::kInt8;
    case DataType::kFP8: return kernels::ElemType::kFloat8E4M3FN;
    case DataType::kUINT8: return static_cast<kernels::ElemType>(2);  // ONNX UINT8
    case DataType::kINT32: return static_cast<kernels::ElemType>(6);  // ONNX INT32
    case DataType::kINT64: return static_cast<kernels::ElemType>(7);  // ONNX INT64
    case DataType::kBOOL: return static_cast<kernels::ElemType>(9);   // ONNX BOOL
    default: return kernels::ElemType::kLikeX;  // none of ONNX's (a message names it "dtype code 0")
  }
}

// An output's TensorRT type from its element type (attrs.h ElemType; kLikeX: X's). false: a type
// TensorRT has no plugin tensor for (float64).
bool to_data_type(kernels::ElemType elem, DataType x_type, DataType* out) {
  switch (elem) {
    case kernels::ElemType::kLikeX: *out = x_type; return true;
    case kernels::ElemType::kFloat32: *out = DataType::kFLOAT; return true;
    case kernels::ElemType::kFloat16: *out = DataType::kHALF; return true;
    case kernels::ElemType::kBFloat16: *out = DataType::kBF16; return true;
    case kernels::ElemType::kInt8: *out = DataType::kINT8; return true;
    case kernels::ElemType::kFloat8E4M3FN: *out = DataType::kFP8; return true;
    default: return false;
  }
}

// Output i's element type for these attribute values: its fixed type, X's, or the one the enum
// attribute named by its descriptor picks (RMSNormQuant's quant_dtype: int8 or fp8).
kernels::ElemType output_elem(const kernels::OpDesc& op, int32_t i, const kernels::AttrValues& attrs) {
  return op.output_descs == nullptr ? kernels::ElemType::kLikeX : kernels::output_elem_type(op, i, attrs);
}

// Output i's shape rule (attrs.h OutShape): the op's rule (split) for an op without descriptors.
kernels::OutShape output_rule(const kernels::OpDesc& op, int32_t i) {
  if (op.output_descs != nullptr) return op.output_descs[i].shape;
  return i == 0 ? kernels::OutShape::kSplit : kernels::OutShape::kLikeX;
}

// The most tensor inputs of any op (X[, R][, W]): the size of the dims arrays below.
constexpr int32_t most_inputs() {
  int32_t most = 0;
  for (const kernels::OpDesc* op : kernels::kOps) most = op->nb_inputs > most ? op->nb_inputs : most;
  return most;
}
constexpr int32_t kMaxInputs = most_inputs();

// Entry i of a descriptor's name list ("X, R, W": 1 -> "R"), for messages.
std::string nth_name(const char* list, int32_t i) {
  const std::string names = list;
  size_t begin = 0;
  for (int32_t k = 0; k < i && begin != std::string::npos; ++k) {
    const size_t comma = names.find(',', begin);
    begin = comma == std::string::npos ? comma : names.find_first_not_of(' ', comma + 1);
  }
  if (begin == std::string::npos) return "input " + std::to_string(i);
  return names.substr(begin, names.find(',', begin) - begin);
}

int64_t volume(const Dims& dims) {
  int64_t n = 1;
  for (int32_t i = 0; i < dims.nbDims; ++i) n *= dims.d[i];
  return n;
}

bool all_empty(const nvinfer1::PluginTensorDesc* outputs, int32_t count) {
  for (int32_t i = 0; i < count; ++i)
    if (volume(outputs[i].dims) != 0) return false;
  return true;
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

nvinfer1::IPluginV3* Plugin::clone() noexcept { return new (std::nothrow) Plugin(*spec_, attrs_); }

nvinfer1::IPluginV3* Plugin::attachToContext(nvinfer1::IPluginResourceContext*) noexcept {
  // Each execution context gets its own plugin object; the plugin holds no per-context resources.
  return clone();
}

// ---- build ----------------------------------------------------------------------------------

int32_t Plugin::check_counts(int32_t nbInputs, int32_t nbOutputs) const noexcept {
  if (nbInputs != spec_->nb_inputs) {
    report(spec_->name, "inputs", std::to_string(spec_->nb_inputs) + " (" + spec_->inputs + ")",
           std::to_string(nbInputs));
    return -1;
  }
  if (nbOutputs != spec_->nb_outputs) {
    report(spec_->name, "outputs", std::to_string(spec_->nb_outputs) + " (" + spec_->outputs + ")",
           std::to_string(nbOutputs));
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
  for (int32_t i = 1; i < nbInputs; ++i)
    if (check_input_type(i, inputTypes[0], inputTypes[i]) != 0) return -1;
  for (int32_t i = 0; i < nbOutputs; ++i) {
    if (!output_type(i, inputTypes[0], &outputTypes[i])) return -1;
  }
  return 0;
}

bool Plugin::is_weight(int32_t i) const noexcept { return kernels::has_weight(*spec_) && i == spec_->nb_inputs - 1; }

// W: X's type, or float32 with a 16-bit X (shapes.h weight_dtype_ok); R: X's type.
bool Plugin::input_type_ok(int32_t i, DataType x_type, DataType type) const noexcept {
  if (is_weight(i)) return kernels::weight_dtype_ok(to_elem_type(x_type), to_elem_type(type));
  return type == x_type;
}

int32_t Plugin::check_input_type(int32_t i, DataType x_type, DataType type) const noexcept {
  if (input_type_ok(i, x_type, type)) return 0;
  try {
    if (is_weight(i))
      log(nvinfer1::ILogger::Severity::kERROR,
          kernels::weight_dtype_error(*spec_, to_elem_type(x_type), to_elem_type(type)));
    else
      report(spec_->name, nth_name(spec_->inputs, i), type_name(x_type) + " tensor (same dtype as X)",
             type_name(type) + " tensor");
  } catch (...) {  // std::string allocation: never let it cross into TensorRT
  }
  return -1;
}

bool Plugin::output_type(int32_t i, DataType x_type, DataType* out) const noexcept {
  if (to_data_type(output_elem(*spec_, i, attrs_), x_type, out)) return true;
  report(spec_->name, nth_name(spec_->outputs, i), "an output type TensorRT has (float32, float16, bfloat16, int8, fp8)",
         "ONNX element type " + std::to_string(static_cast<int32_t>(output_elem(*spec_, i, attrs_))));
  return false;
}

int32_t Plugin::getOutputShapes(const nvinfer1::DimsExprs* inputs, int32_t nbInputs, const nvinfer1::DimsExprs*,
                                int32_t, nvinfer1::DimsExprs* outputs, int32_t nbOutputs,
                                nvinfer1::IExprBuilder& builder) noexcept {
  // A pure function of the input dims. Constant extents are checked too.
  if (check_counts(nbInputs, nbOutputs) != 0) return -1;
  Dims known[kMaxInputs]{};
  for (int32_t i = 0; i < nbInputs; ++i) {
    known[i].nbDims = inputs[i].nbDims;
    for (int32_t k = 0; k < inputs[i].nbDims; ++k) {
      const nvinfer1::IDimensionExpr* e = inputs[i].d[k];
      known[i].d[k] = (e != nullptr && e->isConstant()) ? e->getConstantValue() : -1;
    }
  }
  if (check_dims(known) != 0) return -1;
  for (int32_t i = 0; i < nbOutputs; ++i) outputs[i] = output_dims(i, inputs[0], builder);
  return 0;
}

// Output i's dims from X's by its rule (shapes.h output_shape_at, symbolically): the op's rule (X's
// dims, the last one divided by the op's split), X's dims, or X's with the last one 1.
nvinfer1::DimsExprs Plugin::output_dims(int32_t i, const nvinfer1::DimsExprs& x,
                                        nvinfer1::IExprBuilder& builder) const noexcept {
  nvinfer1::DimsExprs out = x;
  const int32_t last = x.nbDims - 1;
  if (last < 0) return out;
  const kernels::OutShape rule = output_rule(*spec_, i);
  if (rule == kernels::OutShape::kRow) {
    out.d[last] = builder.constant(1);
  } else if (rule == kernels::OutShape::kSplit && spec_->split > 1) {
    out.d[last] = builder.operation(nvinfer1::DimensionOperation::kFLOOR_DIV, *x.d[last], *builder.constant(spec_->split));
  }
  return out;
}

int32_t Plugin::check_dims(const Dims* inputs) const noexcept {
  try {
    const Dims& x = inputs[0];
    std::string error = kernels::x_shape_error(*spec_, x.d, x.nbDims, "a rank-0 tensor (scalar)");
    if (error.empty() && kernels::has_residual(*spec_))
      error = kernels::r_shape_error(*spec_, x.d, x.nbDims, inputs[1].d, inputs[1].nbDims);
    if (error.empty() && kernels::has_weight(*spec_)) {
      const Dims& w = inputs[spec_->nb_inputs - 1];
      error = kernels::w_shape_error(*spec_, x.d, x.nbDims, w.d, w.nbDims);
    }
    if (error.empty()) return 0;
    log(nvinfer1::ILogger::Severity::kERROR, error);
  } catch (...) {  // std::string allocation: never let it cross into TensorRT
  }
  return -1;
}

bool Plugin::supportsFormatCombination(int32_t pos, const nvinfer1::DynamicPluginTensorDesc* inOut, int32_t nbInputs,
                                       int32_t nbOutputs) noexcept {
  if (nbInputs != spec_->nb_inputs || nbOutputs != spec_->nb_outputs) return false;
  if (pos < 0 || pos >= nbInputs + nbOutputs) return false;
  const nvinfer1::PluginTensorDesc& desc = inOut[pos].desc;
  if (desc.format != TensorFormat::kLINEAR) return false;
  cuda::Element element;
  if (pos < nbInputs) {  // X of a kernel type; W X's type or float32 with a 16-bit X, R X's type
    return pos == 0 ? to_element(desc.type, &element) : input_type_ok(pos, inOut[0].desc.type, desc.type);
  }
  // an output: X's type, its fixed type, or the type its attribute picks (int8, fp8)
  DataType wanted;
  return to_element(inOut[0].desc.type, &element) &&
         to_data_type(output_elem(*spec_, pos - nbInputs, attrs_), inOut[0].desc.type, &wanted) &&
         desc.type == wanted;
}

int32_t Plugin::configurePlugin(const nvinfer1::DynamicPluginTensorDesc* in, int32_t nbInputs,
                                const nvinfer1::DynamicPluginTensorDesc*, int32_t nbOutputs) noexcept {
  if (check_counts(nbInputs, nbOutputs) != 0) return -1;
  Dims dims[kMaxInputs]{};
  for (int32_t i = 0; i < nbInputs; ++i) dims[i] = in[i].desc.dims;
  return check_dims(dims);
}

// ---- runtime --------------------------------------------------------------------------------

int32_t Plugin::onShapeChange(const nvinfer1::PluginTensorDesc* in, int32_t nbInputs,
                              const nvinfer1::PluginTensorDesc*, int32_t nbOutputs) noexcept {
  if (check_counts(nbInputs, nbOutputs) != 0) return -1;
  return check_dims(in);
}

int32_t Plugin::check_dims(const nvinfer1::PluginTensorDesc* in) const noexcept {
  Dims dims[kMaxInputs]{};
  for (int32_t i = 0; i < spec_->nb_inputs; ++i) dims[i] = in[i].dims;
  return check_dims(dims);
}

int32_t Plugin::enqueue(const nvinfer1::PluginTensorDesc* inputDesc, const nvinfer1::PluginTensorDesc* outputDesc,
                        const void* const* inputs, void* const* outputs, void*, cudaStream_t stream) noexcept {
  cuda::Element element;
  if (!to_element(inputDesc[0].type, &element)) {
    report(spec_->name, "X", kSupportedTypes, type_name(inputDesc[0].type) + " tensor");
    return -1;
  }
  for (int32_t i = 1; i < spec_->nb_inputs; ++i)  // the kernels read W as X's type or float32
    if (check_input_type(i, inputDesc[0].type, inputDesc[i].type) != 0) return -1;
  // The kernels index R and W by X's dims: shapes TensorRT only learns at runtime are checked
  // here too, before any launch.
  if (check_dims(inputDesc) != 0) return -1;
  const Dims& x = inputDesc[0].dims;
  const kernels::RowView v = kernels::row_view(*spec_, x.d, x.nbDims);
  if (v.rows == 0 || all_empty(outputDesc, spec_->nb_outputs)) return 0;  // nothing to write
  // Before the first launch on a device: a GPU this build has no code for is named, never left to
  // "no kernel image is available".
  if (const std::string& arch = cuda::arch_error(); !arch.empty()) {
    log(nvinfer1::ILogger::Severity::kERROR, std::string("opforge.") + spec_->name + ": " + arch);
    return -1;
  }
  // inputs X[, R][, W] and outputs Y[, H], in the descriptor's order, as TensorRT hands them over; W
  // float32 with a 16-bit X (supportsFormatCombination allowed no other W of another type)
  const bool w_float32 = kernels::has_weight(*spec_) && inputDesc[spec_->nb_inputs - 1].type != inputDesc[0].type;
  const cudaError_t status =
      cuda::forward(*spec_, element, w_float32, inputs, outputs, v.rows, v.cols, attrs_, stream);
  if (status != cudaSuccess) {
    report(spec_->name, "CUDA kernel launch", "cudaSuccess",
           std::string(cudaGetErrorName(status)) + " (" + cudaGetErrorString(status) + ")");
    return -1;
  }
  return 0;
}

const nvinfer1::PluginFieldCollection* Plugin::getFieldsToSerialize() noexcept {
  const int32_t count = spec_->nb_attrs;
  for (int32_t i = 0; i < count; ++i) {
    if (spec_->attrs[i]->type == kernels::AttrType::kFloat) {
      fields_[i] = PluginField(spec_->attrs[i]->name, &attrs_.v[i], PluginFieldType::kFLOAT32, 1);
    } else {  // an int or enum attribute: int32, as TensorRT's ONNX parser hands INT attributes over
      int_values_[i] = static_cast<int32_t>(attrs_.v[i]);
      fields_[i] = PluginField(spec_->attrs[i]->name, &int_values_[i], PluginFieldType::kINT32, 1);
    }
  }
  fields_[count] = PluginField(kFormatField, &format_version_, PluginFieldType::kINT32, 1);
  field_collection_.nbFields = count + 1;
  field_collection_.fields = fields_.data();
  return &field_collection_;
}

}  // namespace opforge_trt
