// OrtCustomOp tables for every opforge op (domain version 1; names, inputs, attributes and shape
// rules from the generated descriptors in attrs.h / shapes.h), kernel creation (attributes) and
// input validation, written once for every op. Filled field by field instead of through
// Ort::CustomOpBase, which stamps the header's ORT_API_VERSION and sets callbacks newer than our
// minimum API.
#include "ops.h"

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

// ---- attributes and kernel creation ------------------------------------------------------

std::string node_name(const OrtApi& api, const OrtKernelInfo* info) {
  size_t size = 0;
  if (OrtStatus* s = api.KernelInfo_GetNodeName(info, nullptr, &size)) {
    api.ReleaseStatus(s);
    return {};
  }
  std::string name(size, '\0');
  if (OrtStatus* s = api.KernelInfo_GetNodeName(info, name.data(), &size)) {
    api.ReleaseStatus(s);
    return {};
  }
  name.resize(size > 0 ? size - 1 : 0);  // size counts the terminating NUL
  return name;
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

OrtStatus* read_attributes(Kernel& k, const OrtKernelInfo* info) {
  const opforge::kernels::OpDesc& op = *k.def->desc;
  for (int32_t i = 0; i < op.nb_attrs; ++i) OPFORGE_TRY(float_attr(k, info, *op.attrs[i], &k.attrs.v[i]));
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
    if (x.type == k.def->x_type) return nullptr;  // ORT only routes the declared type here
    return k.fail("X", type_name(k.def->x_type) + " tensor", type_name(x.type) + " tensor");
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

// W (ops with a second input): X's type, a 1-D per-column weight.
OrtStatus* check_weight(const Kernel& k, const Tensor& x, const Tensor& w) {
  if (w.type != x.type)
    return k.fail("W", type_name(x.type) + " tensor (same type as X)", type_name(w.type) + " tensor");
  const std::string error = opforge::kernels::w_shape_error(*k.def->desc, x.shape.data(), rank(x), w.shape.data(),
                                                            rank(w));
  return error.empty() ? nullptr : k.fail(error);
}

// Every op: inputs checked by the op's descriptor, Y allocated, then its CPU or CUDA kernel.
OrtStatus* run(const Kernel& k, OrtKernelContext* ctx) {
  const opforge::kernels::OpDesc& op = *k.def->desc;
  Tensor x, w;
  OPFORGE_TRY(read_input(k, ctx, 0, x));
  const bool weighted = op.nb_inputs > 1;
  if (weighted) OPFORGE_TRY(read_input(k, ctx, 1, w));
  OPFORGE_TRY(check_x_type(k, x));
  const std::string x_error = opforge::kernels::x_shape_error(op, x.shape.data(), rank(x), "a rank-0 tensor (scalar)");
  if (!x_error.empty()) return k.fail(x_error);
  if (weighted) OPFORGE_TRY(check_weight(k, x, w));
  std::vector<int64_t> y_shape(x.shape.size());
  opforge::kernels::output_shape(op, x.shape.data(), rank(x), y_shape.data());
  void* y = nullptr;
  OPFORGE_TRY(alloc_output(k, ctx, y_shape, &y));
  if (x.size == 0) return nullptr;
  const opforge::kernels::RowView v = opforge::kernels::row_view(op, x.shape.data(), rank(x));
#ifdef OPFORGE_WITH_CUDA
  if (k.on_cuda()) {
    OPFORGE_TRY(check_device_arch(k));
    void* stream = nullptr;
    OPFORGE_TRY(cuda_stream(k, ctx, &stream));
    const void* inputs[] = {x.data, weighted ? w.data : nullptr};
    void* outputs[] = {y};
    return cuda_status(k, cuda::forward(op, x.type, inputs, outputs, v.rows, v.cols, k.attrs, stream));
  }
#endif
  return k.def->cpu(k, ctx, x, weighted ? &w : nullptr, y, v);
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
  return i == 0 ? def_of(op).x_type : def_of(op).w_type;
}
size_t ORT_API_CALL output_count(const OrtCustomOp*) { return 1; }
// UNDEFINED: ORT takes the output type from the one input whose type is open (X).
ONNXTensorElementDataType ORT_API_CALL output_type(const OrtCustomOp* op, size_t) { return def_of(op).x_type; }
OrtCustomOpInputOutputCharacteristic ORT_API_CALL required(const OrtCustomOp*, size_t) {
  return INPUT_OUTPUT_REQUIRED;
}
OrtMemType ORT_API_CALL default_memory(const OrtCustomOp*, size_t) { return OrtMemTypeDefault; }
int ORT_API_CALL one(const OrtCustomOp*) { return 1; }
int ORT_API_CALL domain_version(const OrtCustomOp*) { return opforge::kernels::kDomainVersion; }

OpDef make_def(const opforge::kernels::OpDesc& op, const char* provider, ONNXTensorElementDataType x_type, ONNXTensorElementDataType w_type) {
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
  o.GetOutputCharacteristic = required;
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
  d.x_type = x_type;
  d.w_type = w_type;
  return d;
}

// Every op of the generated descriptors (kOps) that has a CPU kernel (cpu_kernels.cc).
std::vector<OpDef> make_defs() {
  constexpr auto kAny = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  std::vector<OpDef> defs;
  for (const opforge::kernels::OpDesc* op : opforge::kernels::kOps) {
    if (cpu_forward(*op) == nullptr) continue;
    if (op->nb_inputs == 1) {
      defs.push_back(make_def(*op, nullptr, kAny, kAny));
      continue;
    }
    // Two inputs, but ORT allows only one open ("UNDEFINED") input type per op, so W's type is
    // enumerated: every W type reaches Compute, which names the mismatch clearly.
    for (auto w : {ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE,
                   ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16, ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16,
                   ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8, ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8,
                   ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16, ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16,
                   ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32, ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32,
                   ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64, ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64,
                   ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL})
      defs.push_back(make_def(*op, nullptr, kAny, w));
  }
#ifdef OPFORGE_WITH_CUDA
  // CUDA kernels declare exact types, so ORT falls back to the CPU kernels for the others.
  constexpr const char* kCuda = "CUDAExecutionProvider";
  for (auto t : {ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16})
    for (const opforge::kernels::OpDesc* op : opforge::kernels::kOps) defs.push_back(make_def(*op, kCuda, t, t));
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
