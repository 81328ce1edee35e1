// OrtCustomOp tables for every opforge op (domain version 1; names, inputs, attributes and shape
// rules from the generated descriptors in attrs.h / shapes.h), kernel creation (attributes) and
// input validation, written once for every op. Filled field by field instead of through
// Ort::CustomOpBase, which stamps the header's ORT_API_VERSION and sets callbacks newer than our
// minimum API.
#include "ops.h"

#include <array>
#include <exception>
#include <memory>

#ifdef OPFORGE_WITH_CUDA
#include "cuda_kernels.h"
#endif

// API 17 brings what these tables and kernels rely on: GetStartVersion/GetEndVersion and
// KernelContext_ParallelFor (ORT's own thread pool, so no thread pool of ours).
static_assert(OPFORGE_ORT_MIN_API >= 17, "opforge_ort needs ORT API >= 17");

namespace opforge_ort {
namespace {

const OpDef& def_of(const OrtCustomOp* op) { return *reinterpret_cast<const OpDef*>(op); }

// One element type per input, in the descriptor's order (OpDef::input_types).
using InputTypes = std::array<ONNXTensorElementDataType, kMaxInputs>;

constexpr bool tensors_fit() {
  for (const opforge::kernels::OpDesc* op : opforge::kernels::kOps)
    if (op->nb_inputs > kMaxInputs || op->nb_outputs > kMaxOutputs) return false;
  return true;
}
static_assert(tensors_fit(), "an op has more inputs or outputs than OpDef holds: raise kMaxInputs/kMaxOutputs");

// ---- attributes and kernel creation ------------------------------------------------------

// A string the API writes through get(buffer, &size) (size asked first, with buffer nullptr);
// empty when it fails.
template <class Get>
std::string api_string(const OrtApi& api, Get&& get) {
  size_t size = 0;
  if (OrtStatus* s = get(nullptr, &size)) {
    api.ReleaseStatus(s);
    return {};
  }
  std::string text(size, '\0');
  if (OrtStatus* s = get(text.data(), &size)) {
    api.ReleaseStatus(s);
    return {};
  }
  text.resize(size > 0 ? size - 1 : 0);  // size counts the terminating NUL
  return text;
}

std::string node_name(const OrtApi& api, const OrtKernelInfo* info) {
  return api_string(api, [&](char* out, size_t* size) { return api.KernelInfo_GetNodeName(info, out, size); });
}

// Every output of the op is required, but outputs after Y are declared optional to ORT (see
// output_characteristic): a node that leaves one out is refused here, at session creation.
OrtStatus* check_outputs_named(const Kernel& k, const OrtKernelInfo* info) {
  const opforge::kernels::OpDesc& op = *k.def->desc;
  const OrtApi& api = *k.api;
  size_t count = 0;
  OPFORGE_TRY(api.KernelInfo_GetOutputCount(info, &count));
  for (size_t i = 0; i < static_cast<size_t>(op.nb_outputs); ++i) {
    const auto get = [&](char* out, size_t* size) { return api.KernelInfo_GetOutputName(info, i, out, size); };
    if (i >= count || api_string(api, get).empty())
      return k.fail(nth_name(op.outputs, i), std::string("a named output (the node's outputs are ") + op.outputs + ")",
                    "none");
  }
  return nullptr;
}

// ---- attribute types at ORT API 17 -------------------------------------------------------------
// API 17 has no call that returns an attribute's type on an OrtKernelInfo (OrtOpAttr readers for
// kernels came later), so the type is told apart by which getter accepts the attribute:
//  - KernelInfoGetAttribute_float/_int64/_string/_tensor succeed only for FLOAT/INT/STRING/TENSOR
//    (ORT compares AttributeProto.type);
//  - KernelInfoGetAttributeArray_float/_int64 read the list fields without checking the type, so
//    they succeed for an attribute of any type that is present: FLOATS/INTS when the list is
//    non-empty, and "present, of another type" otherwise (STRINGS, GRAPH, ...).

bool succeeded(const OrtApi& api, OrtStatus* status) {
  if (status == nullptr) return true;
  api.ReleaseStatus(status);
  return false;
}

bool is_tensor_attribute(const OrtApi& api, const OrtKernelInfo* info, const char* name) {
  OrtAllocator* allocator = nullptr;
  if (!succeeded(api, api.GetAllocatorWithDefaultOptions(&allocator))) return false;
  OrtValue* value = nullptr;
  if (!succeeded(api, api.KernelInfoGetAttribute_tensor(info, name, allocator, &value))) return false;
  api.ReleaseValue(value);
  return true;
}

// What a non-FLOAT attribute `name` is ("an INT attribute (2)", "a STRING attribute", ...);
// empty when the node has no attribute of that name.
std::string non_float_attribute(const OrtApi& api, const OrtKernelInfo* info, const char* name) {
  int64_t as_int = 0;
  if (succeeded(api, api.KernelInfoGetAttribute_int64(info, name, &as_int)))
    return "an INT attribute (" + std::to_string(as_int) + ")";
  size_t size = 0;
  if (succeeded(api, api.KernelInfoGetAttribute_string(info, name, nullptr, &size))) return "a STRING attribute";
  if (is_tensor_attribute(api, info, name)) return "a TENSOR attribute";
  size_t floats = 0, ints = 0;
  if (succeeded(api, api.KernelInfoGetAttributeArray_float(info, name, nullptr, &floats)) && floats > 0)
    return "a FLOATS attribute (" + std::to_string(floats) + " values)";
  if (succeeded(api, api.KernelInfoGetAttributeArray_int64(info, name, nullptr, &ints)) && ints > 0)
    return "an INTS attribute (" + std::to_string(ints) + " values)";
  size = 0;  // the list getters' presence test (see above): present but of none of these types
  if (succeeded(api, api.KernelInfoGetAttributeArray_float(info, name, nullptr, &size)))
    return "an attribute of another type (not FLOAT)";
  return {};
}

// The FLOAT attribute `attr`, its default when the node has none; any other type is an error.
// The value then follows the shared float32 rule (kernels attrs.h), like in every layer.
OrtStatus* float_attr(const Kernel& k, const OrtKernelInfo* info, const opforge::kernels::AttrSpec& attr,
                      float* out) {
  const OrtApi& api = *k.api;
  if (!succeeded(api, api.KernelInfoGetAttribute_float(info, attr.name, out))) {
    const std::string got = non_float_attribute(api, info, attr.name);
    if (!got.empty()) return k.fail(attr.name, "a FLOAT attribute", got);
    *out = static_cast<float>(attr.default_value);
  }
  const std::string error = opforge::kernels::attr_error(attr, *out);
  return error.empty() ? nullptr : k.fail(error);
}

// What a non-INT attribute `name` is ("a FLOAT attribute (2.5)", ...); empty when the node has
// none of that name.
std::string non_int_attribute(const OrtApi& api, const OrtKernelInfo* info, const char* name) {
  float as_float = 0;
  if (succeeded(api, api.KernelInfoGetAttribute_float(info, name, &as_float)))
    return "a FLOAT attribute (" + opforge::kernels::format_number(as_float) + ")";
  const std::string other = non_float_attribute(api, info, name);
  if (other.rfind("an INT attribute", 0) == 0) return {};
  return other == "an attribute of another type (not FLOAT)" ? "an attribute of another type (not INT)" : other;
}

// The INT attribute `attr` (an int or enum attribute of the spec), its default when the node has
// none; any other type is an error, and the value follows the shared rule (an integer in range,
// an enum's value one of its choices).
OrtStatus* int_attr(const Kernel& k, const OrtKernelInfo* info, const opforge::kernels::AttrSpec& attr,
                    float* out) {
  const OrtApi& api = *k.api;
  int64_t value = 0;
  double as_double = attr.default_value;
  if (succeeded(api, api.KernelInfoGetAttribute_int64(info, attr.name, &value))) {
    as_double = static_cast<double>(value);
  } else {
    const std::string got = non_int_attribute(api, info, attr.name);
    if (!got.empty()) return k.fail(attr.name, "an INT attribute", got);
  }
  const std::string error = opforge::kernels::attr_error(attr, as_double);
  if (!error.empty()) return k.fail(error);
  *out = static_cast<float>(as_double);  // |value| <= 2^24: exact in float32 (attrs.h kIntLimit)
  return nullptr;
}

OrtStatus* read_attributes(Kernel& k, const OrtKernelInfo* info) {
  const opforge::kernels::OpDesc& op = *k.def->desc;
  for (int32_t i = 0; i < op.nb_attrs; ++i) {
    const opforge::kernels::AttrSpec& attr = *op.attrs[i];
    OPFORGE_TRY(attr.type == opforge::kernels::AttrType::kFloat ? float_attr(k, info, attr, &k.attrs.v[i])
                                                                : int_attr(k, info, attr, &k.attrs.v[i]));
  }
  return nullptr;
}

// The name of an enum attribute's value ("int8"), or its number.
std::string choice_name(const opforge::kernels::AttrSpec& attr, int32_t value) {
  for (int32_t i = 0; i < attr.nb_choices; ++i)
    if (attr.choices[i].value == value) return attr.choices[i].name;
  return std::to_string(value);
}

// An output whose element type an attribute picks was registered with one type (output_types):
// ORT's custom-op API (1.17 to 1.32) fixes each output's type when the op is registered and
// infers a node's output types from its inputs alone (ShapeInferContext_SetOutputTypeShape sets
// the shape only), so a node asking for another type is refused here, at session creation.
OrtStatus* check_output_types_served(const Kernel& k) {
  const opforge::kernels::OpDesc& op = *k.def->desc;
  for (int32_t i = 0; i < op.nb_outputs && op.output_descs != nullptr; ++i) {
    const int32_t a = op.output_descs[i].dtype_attr;
    if (a < 0) continue;
    const auto wanted = static_cast<int32_t>(k.attrs[a]);
    const auto served = static_cast<int32_t>(k.def->output_types[i]);
    if (wanted == served) continue;
    const opforge::kernels::AttrSpec& attr = *op.attrs[a];
    return k.fail(attr.name,
                  std::to_string(served) + " (" + choice_name(attr, served) + ") in ONNX Runtime: its custom-op API "
                  "fixes output " + nth_name(op.outputs, i) + "'s element type when the op is registered, so "
                  "opforge_ort serves " + choice_name(attr, served) + " only",
                  std::to_string(wanted) + " (" + choice_name(attr, wanted) + ")");
  }
  return nullptr;
}

template <class F>
OrtStatus* guarded(const OrtApi& api, F&& f) {
  // No C++ exception may cross into ONNX Runtime (std::bad_alloc from a vector, say).
  try {
    return f();
  } catch (const std::exception& e) {
    return api.CreateStatus(ORT_FAIL, (std::string("opforge_ort: ") + e.what()).c_str());
  } catch (...) {
    return api.CreateStatus(ORT_FAIL, "opforge_ort: unknown C++ exception");
  }
}

OrtStatus* ORT_API_CALL create_kernel(const OrtCustomOp* op, const OrtApi* api, const OrtKernelInfo* info,
                                      void** kernel) {
  return guarded(*api, [&]() -> OrtStatus* {
    auto k = std::make_unique<Kernel>();
    k->api = api;
    k->def = &def_of(op);
    k->node = node_name(*api, info);
    OPFORGE_TRY(read_attributes(*k, info));
    OPFORGE_TRY(check_output_types_served(*k));
    OPFORGE_TRY(check_outputs_named(*k, info));
    *kernel = k.release();
    return nullptr;
  });
}

void ORT_API_CALL destroy_kernel(void* kernel) { delete static_cast<Kernel*>(kernel); }

// ---- validation and dispatch ---------------------------------------------------------------

bool cpu_type(ONNXTensorElementDataType t) {
  return t == ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT || t == ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE ||
         t == ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16;
}

OrtStatus* check_x_type(const Kernel& k, const Tensor& x) {
  if (k.on_cuda()) {
    if (x.type == k.def->x_type()) return nullptr;  // ORT only routes the declared type here
    return k.fail("X", type_name(k.def->x_type()) + " tensor", type_name(x.type) + " tensor");
  }
  if (cpu_type(x.type)) return nullptr;
  return k.fail("X", "float32, float64 or bfloat16 tensor", type_name(x.type) + " tensor");
}

#ifdef OPFORGE_WITH_CUDA
OrtStatus* cuda_status(const Kernel& k, int error) {
  if (error == 0) return nullptr;
  return k.api->CreateStatus(ORT_FAIL, (std::string("opforge.") + k.op_name() + ": CUDA launch failed: " +
                                        cuda::error_string(error) + " (node \"" + k.node + "\")")
                                           .c_str());
}

OrtStatus* cuda_stream(const Kernel& k, OrtKernelContext* ctx, void** stream) {
  return k.api->KernelContext_GetGPUComputeStream(ctx, stream);
}

// Before the first launch on a device: a GPU this build has no code for is named, never left to
// "no kernel image is available".
OrtStatus* check_device_arch(const Kernel& k) {
  const char* error = cuda::arch_error();
  if (error == nullptr) return nullptr;
  return k.api->CreateStatus(ORT_FAIL, (std::string("opforge.") + k.op_name() + ": " + error + " (node \"" +
                                        k.node + "\")").c_str());
}
#endif

OrtStatus* fail_unless_empty(const Kernel& k, const std::string& error) {
  return error.empty() ? nullptr : k.fail(error);
}

// The shape rule of input `index` > 0: R (the second of three) has X's shape, W (the last) is a
// 1-D per-column weight (shapes.h has_residual / has_weight).
std::string shape_error(const opforge::kernels::OpDesc& op, int32_t index, const Tensor& x, const Tensor& t) {
  if (opforge::kernels::has_residual(op) && index == 1)
    return opforge::kernels::r_shape_error(op, x.shape.data(), rank(x), t.shape.data(), rank(t));
  return opforge::kernels::w_shape_error(op, x.shape.data(), rank(x), t.shape.data(), rank(t));
}

bool is_weight(const opforge::kernels::OpDesc& op, int32_t index) {
  return opforge::kernels::has_weight(op) && index == op.nb_inputs - 1;
}

opforge::kernels::ElemType elem_type(ONNXTensorElementDataType type) {
  return static_cast<opforge::kernels::ElemType>(type);  // both are ONNX TensorProto codes
}

// The dtype rule of input `index` > 0: W has X's dtype or float32 with a 16-bit X (shapes.h
// weight_dtype_error), R has X's.
OrtStatus* check_input_type(const Kernel& k, int32_t index, const Tensor& x, const Tensor& t) {
  const opforge::kernels::OpDesc& op = *k.def->desc;
  if (is_weight(op, index))
    return fail_unless_empty(k, opforge::kernels::weight_dtype_error(op, elem_type(x.type), elem_type(t.type)));
  if (t.type == x.type) return nullptr;
  return k.fail(nth_name(op.inputs, index), type_name(x.type) + " tensor (same dtype as X)",
                type_name(t.type) + " tensor");
}

// X's type and shape, then every other input (its dtype rule, its shape rule), in descriptor order.
OrtStatus* check_inputs(const Kernel& k, const std::vector<Tensor>& in) {
  const opforge::kernels::OpDesc& op = *k.def->desc;
  const Tensor& x = in[0];
  OPFORGE_TRY(check_x_type(k, x));
  OPFORGE_TRY(fail_unless_empty(
      k, opforge::kernels::x_shape_error(op, x.shape.data(), rank(x), "a rank-0 tensor (scalar)")));
  for (int32_t i = 1; i < op.nb_inputs; ++i) {
    OPFORGE_TRY(check_input_type(k, i, x, in[i]));
    OPFORGE_TRY(fail_unless_empty(k, shape_error(op, i, x, in[i])));
  }
  return nullptr;
}

// A mixed-dtype call (checked inputs): W in float32 with a 16-bit X.
bool w_is_float32(const opforge::kernels::OpDesc& op, const std::vector<Tensor>& in) {
  return opforge::kernels::has_weight(op) && in[op.nb_inputs - 1].type != in[0].type;
}

// Every output from X's shape by its rule (shapes.h output_shape_at: the op's rule, X's shape, or
// X's with the last dim 1).
OrtStatus* alloc_outputs(const Kernel& k, OrtKernelContext* ctx, const Tensor& x, std::vector<void*>& outputs) {
  const opforge::kernels::OpDesc& op = *k.def->desc;
  std::vector<int64_t> shape(x.shape.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    opforge::kernels::output_shape_at(op, static_cast<int32_t>(i), x.shape.data(), rank(x), shape.data());
    OPFORGE_TRY(alloc_output(k, ctx, i, shape, &outputs[i]));
  }
  return nullptr;
}

bool all_empty(const std::vector<void*>& outputs) {
  for (const void* data : outputs)
    if (data != nullptr) return false;
  return true;
}

// Every op: inputs checked by the op's descriptor, its outputs allocated, then its CPU or CUDA
// kernel with the inputs and outputs in descriptor order.
OrtStatus* run(const Kernel& k, OrtKernelContext* ctx) {
  const opforge::kernels::OpDesc& op = *k.def->desc;
  std::vector<Tensor> in(op.nb_inputs);
  for (int32_t i = 0; i < op.nb_inputs; ++i) OPFORGE_TRY(read_input(k, ctx, i, in[i]));
  OPFORGE_TRY(check_inputs(k, in));
  const Tensor& x = in[0];
  std::vector<void*> outputs(op.nb_outputs, nullptr);
  OPFORGE_TRY(alloc_outputs(k, ctx, x, outputs));
  const opforge::kernels::RowView v = opforge::kernels::row_view(op, x.shape.data(), rank(x));
  if (all_empty(outputs) || v.rows == 0) return nullptr;  // nothing to write
  std::vector<const void*> inputs;
  for (const Tensor& t : in) inputs.push_back(t.data);
  const bool w_float32 = w_is_float32(op, in);
#ifdef OPFORGE_WITH_CUDA
  if (k.on_cuda()) {
    OPFORGE_TRY(check_device_arch(k));
    void* stream = nullptr;
    OPFORGE_TRY(cuda_stream(k, ctx, &stream));
    return cuda_status(k, cuda::forward(op, x.type, w_float32, inputs.data(), outputs.data(), v.rows, v.cols, k.attrs,
                                        stream));
  }
#endif
  return k.def->cpu(k, ctx, x.type, w_float32, inputs.data(), outputs.data(), v);
}

OrtStatus* ORT_API_CALL compute(void* kernel, OrtKernelContext* ctx) {
  const Kernel& k = *static_cast<const Kernel*>(kernel);
  return guarded(*k.api, [&] { return run(k, ctx); });
}

// ---- the OrtCustomOp callbacks -------------------------------------------------------------

const char* ORT_API_CALL get_name(const OrtCustomOp* op) { return def_of(op).desc->name; }
const char* ORT_API_CALL get_provider(const OrtCustomOp* op) { return def_of(op).provider; }
size_t ORT_API_CALL input_count(const OrtCustomOp* op) { return def_of(op).desc->nb_inputs; }
ONNXTensorElementDataType ORT_API_CALL input_type(const OrtCustomOp* op, size_t i) {
  return def_of(op).input_types[i];
}
size_t ORT_API_CALL output_count(const OrtCustomOp* op) { return def_of(op).desc->nb_outputs; }
// UNDEFINED: ORT takes the output's type from the one input whose type is open (X).
ONNXTensorElementDataType ORT_API_CALL output_type(const OrtCustomOp* op, size_t i) {
  return def_of(op).output_types[i];
}
OrtCustomOpInputOutputCharacteristic ORT_API_CALL required(const OrtCustomOp*, size_t) {
  return INPUT_OUTPUT_REQUIRED;
}
// ORT 1.17's schema builder allows one required output of open type (X's) at most: it counts each
// such output as one more open input type. So the outputs after Y are declared optional, on every
// execution provider alike (ORT merges an op's kernels into one schema); check_outputs_named
// refuses a node without them.
OrtCustomOpInputOutputCharacteristic ORT_API_CALL output_characteristic(const OrtCustomOp*, size_t i) {
  return i == 0 ? INPUT_OUTPUT_REQUIRED : INPUT_OUTPUT_OPTIONAL;
}
OrtMemType ORT_API_CALL default_memory(const OrtCustomOp*, size_t) { return OrtMemTypeDefault; }
int ORT_API_CALL one(const OrtCustomOp*) { return 1; }
int ORT_API_CALL domain_version(const OrtCustomOp*) { return opforge::kernels::kDomainVersion; }

// Output i's declared element type for a def whose X is declared `x_type` (UNDEFINED: open): X's,
// a fixed type, or the default of the enum attribute that picks it (check_output_types_served).
ONNXTensorElementDataType declared_output_type(const opforge::kernels::OpDesc& op, int32_t i,
                                               ONNXTensorElementDataType x_type) {
  if (op.output_descs == nullptr) return x_type;
  const opforge::kernels::OutputDesc& out = op.output_descs[i];
  const int32_t code = out.dtype_attr >= 0 ? static_cast<int32_t>(op.attrs[out.dtype_attr]->default_value)
                                           : static_cast<int32_t>(out.dtype);
  return code == static_cast<int32_t>(opforge::kernels::ElemType::kLikeX)
             ? x_type
             : static_cast<ONNXTensorElementDataType>(code);  // ElemType codes are ONNX's
}

OpDef make_def(const opforge::kernels::OpDesc& op, const char* provider, const InputTypes& types) {
  OpDef d{};  // zero: every callback newer than the stamped version stays null
  OrtCustomOp& o = d.ort;
  o.version = OPFORGE_ORT_MIN_API;  // never the header's ORT_API_VERSION: older runtimes refuse it
  o.GetName = get_name;
  o.GetExecutionProviderType = get_provider;
  o.GetInputTypeCount = input_count;
  o.GetInputType = input_type;
  o.GetOutputTypeCount = output_count;
  o.GetOutputType = output_type;
  o.KernelDestroy = destroy_kernel;
  o.GetInputCharacteristic = required;        // API 8
  o.GetOutputCharacteristic = output_characteristic;
  o.GetInputMemoryType = default_memory;      // API 13
  o.GetVariadicInputMinArity = one;           // API 14 (not variadic; ORT reads them anyway)
  o.GetVariadicInputHomogeneity = one;
  o.GetVariadicOutputMinArity = one;
  o.GetVariadicOutputHomogeneity = one;
  o.CreateKernelV2 = create_kernel;           // API 16: errors as OrtStatus, not exceptions
  o.KernelComputeV2 = compute;
  // API 17: the kernels implement opforge v1. ORT (1.17-1.32) does not refuse other imports with
  // it: one schema per op name, since version 1, serves every import 1..1000, and kernels are
  // matched against that schema's since version, never the model's import; nothing at API 17
  // lets a kernel see the import. opforge_ort.check_model / inference_session refuse them.
  o.GetStartVersion = domain_version;
  o.GetEndVersion = domain_version;
  d.desc = &op;
  d.cpu = cpu_forward(op);
  d.provider = provider;
  for (int32_t i = 0; i < kMaxInputs; ++i) d.input_types[i] = types[i];
  for (int32_t i = 0; i < op.nb_outputs; ++i) d.output_types[i] = declared_output_type(op, i, types[0]);
  return d;
}

// The element types an input other than X is declared with on the CPU EP: every type a model can
// give it, so that each one reaches Compute, which names a mismatch clearly.
constexpr ONNXTensorElementDataType kEnumeratedTypes[] = {
    ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT,  ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE, ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16,
    ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16, ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8,  ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8,
    ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16,  ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16, ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32,
    ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32, ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64,  ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64,
    ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL};
constexpr size_t kNbEnumerated = sizeof(kEnumeratedTypes) / sizeof(kEnumeratedTypes[0]);

// CPU EP: X's type is open ("UNDEFINED"), but ORT allows only one open input type per op, so the
// other inputs' types are enumerated, one OpDef per combination (W: 13; R and W: 13 x 13).
void add_cpu_defs(const opforge::kernels::OpDesc& op, std::vector<OpDef>& defs) {
  size_t combinations = 1;
  for (int32_t i = 1; i < op.nb_inputs; ++i) combinations *= kNbEnumerated;
  for (size_t c = 0; c < combinations; ++c) {
    InputTypes types{};  // UNDEFINED
    size_t digits = c;
    for (int32_t i = 1; i < op.nb_inputs; ++i, digits /= kNbEnumerated)
      types[i] = kEnumeratedTypes[digits % kNbEnumerated];
    defs.push_back(make_def(op, nullptr, types));
  }
}

#ifdef OPFORGE_WITH_CUDA
// CUDA kernels declare exact types, so ORT falls back to the CPU kernels for the others: every
// input X's (float32, float16), and for an op with a weight, float16 X (and R) with a float32 W
// (a mixed-dtype call, shapes.h weight_dtype_ok). ORT merges the defs of one name into one schema
// and picks the def whose declared types match the node's.
void add_cuda_defs(const opforge::kernels::OpDesc& op, std::vector<OpDef>& defs) {
  constexpr const char* kCuda = "CUDAExecutionProvider";
  for (auto t : {ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16}) {
    InputTypes types{};
    for (int32_t i = 0; i < op.nb_inputs; ++i) types[i] = t;
    defs.push_back(make_def(op, kCuda, types));
    if (!opforge::kernels::has_weight(op) || !opforge::kernels::weight_may_be_float32(elem_type(t))) continue;
    types[op.nb_inputs - 1] = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
    defs.push_back(make_def(op, kCuda, types));
  }
}
#endif

// Every op of the generated descriptors (kOps) that has a CPU kernel (cpu_kernels.cc).
std::vector<OpDef> make_defs() {
  std::vector<OpDef> defs;
  for (const opforge::kernels::OpDesc* op : opforge::kernels::kOps)
    if (cpu_forward(*op) != nullptr) add_cpu_defs(*op, defs);
#ifdef OPFORGE_WITH_CUDA
  for (const opforge::kernels::OpDesc* op : opforge::kernels::kOps) add_cuda_defs(*op, defs);
#endif
  return defs;
}

}  // namespace

const std::vector<const OrtCustomOp*>& custom_ops() {
  static const std::vector<OpDef> defs = make_defs();
  static const std::vector<const OrtCustomOp*> ops = [] {
    std::vector<const OrtCustomOp*> v;
    for (const OpDef& d : defs) v.push_back(&d.ort);
    return v;
  }();
  return ops;
}

}  // namespace opforge_ort
