#include "ort_util.h"

#include <memory>

namespace opforge_ort {

OrtStatus* Kernel::fail(const std::string& what, const std::string& expected, const std::string& got) const {
  return fail(std::string("opforge.") + op_name() + ": " + what + ": expected " + expected + ", got " + got);
}

OrtStatus* Kernel::fail(const std::string& canonical) const {
  const std::string message = canonical + " (node \"" + node + "\")";
  return api->CreateStatus(ORT_INVALID_ARGUMENT, message.c_str());
}

std::string type_name(ONNXTensorElementDataType type) {
  switch (type) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT: return "float32";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE: return "float64";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16: return "float16";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16: return "bfloat16";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8: return "int8";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8: return "uint8";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16: return "int16";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16: return "uint16";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32: return "int32";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32: return "uint32";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64: return "int64";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64: return "uint64";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL: return "bool";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING: return "string";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E4M3FN: return "float8_e4m3fn";
    default: return "ONNX element type " + std::to_string(static_cast<int>(type));
  }
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string nth_name(const char* names, size_t index) {
  std::string rest = names;
  for (size_t i = 0; i < index; ++i) {
    const size_t comma = rest.find(", ");
    if (comma == std::string::npos) return {};
    rest.erase(0, comma + 2);
  }
  return rest.substr(0, rest.find(", "));
}

namespace {
struct InfoDeleter {
  const OrtApi* api;
  void operator()(OrtTensorTypeAndShapeInfo* info) const { api->ReleaseTensorTypeAndShapeInfo(info); }
};
}  // namespace

OrtStatus* read_input(const Kernel& k, OrtKernelContext* ctx, size_t index, Tensor& out) {
  const OrtApi& api = *k.api;
  const OrtValue* value = nullptr;
  OPFORGE_TRY(api.KernelContext_GetInput(ctx, index, &value));
  if (value == nullptr) return k.fail(nth_name(k.def->desc->inputs, index), "a tensor", "no input");
  OrtTensorTypeAndShapeInfo* raw = nullptr;
  OPFORGE_TRY(api.GetTensorTypeAndShape(value, &raw));
  std::unique_ptr<OrtTensorTypeAndShapeInfo, InfoDeleter> info(raw, InfoDeleter{&api});
  OPFORGE_TRY(api.GetTensorElementType(info.get(), &out.type));
  size_t rank = 0;
  OPFORGE_TRY(api.GetDimensionsCount(info.get(), &rank));
  out.shape.assign(rank, 0);
  OPFORGE_TRY(api.GetDimensions(info.get(), out.shape.data(), rank));
  size_t count = 0;
  OPFORGE_TRY(api.GetTensorShapeElementCount(info.get(), &count));
  out.size = static_cast<int64_t>(count);
  out.data = nullptr;
  if (out.size > 0) {
    void* data = nullptr;
    OPFORGE_TRY(api.GetTensorMutableData(const_cast<OrtValue*>(value), &data));
    out.data = data;
  }
  return nullptr;
}

OrtStatus* alloc_output(const Kernel& k, OrtKernelContext* ctx, size_t index, const std::vector<int64_t>& shape,
                        void** data) {
  const OrtApi& api = *k.api;
  OrtValue* value = nullptr;
  OPFORGE_TRY(api.KernelContext_GetOutput(ctx, index, shape.data(), shape.size(), &value));
  if (value == nullptr) return k.fail(nth_name(k.def->desc->outputs, index), "a named output", "none");
  *data = nullptr;
  int64_t count = 1;
  for (int64_t d : shape) count *= d;
  if (count > 0) OPFORGE_TRY(api.GetTensorMutableData(value, data));
  return nullptr;
}

}  // namespace opforge_ort
