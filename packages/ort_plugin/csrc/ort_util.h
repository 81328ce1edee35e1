// Small helpers over the ONNX Runtime C API: statuses with opforge's canonical message shape,
// tensor access and ORT-thread-pool parallel loops. Only functions of API <= OPFORGE_ORT_MIN_API.
#pragma once

#include <opforge/kernels/shapes.h>

#include <onnxruntime_c_api.h>

#include <cstdint>
#include <string>
#include <vector>

namespace opforge_ort {

struct Kernel;
struct Tensor;
// An op's CPU kernel (cpu_kernels.cc): its inputs validated, of X's element type `type` (W float32
// instead when `w_float32`: a mixed-dtype call), in its descriptor's order (X[, R][, W]), its
// outputs (Y[, H]) allocated, X as rows.
using CpuKernel = OrtStatus* (*)(const Kernel& k, OrtKernelContext* ctx, ONNXTensorElementDataType type,
                                 bool w_float32, const void* const* inputs, void* const* outputs,
                                 const opforge::kernels::RowView& v);

// The most tensor inputs an op of the descriptors has (X, R, W), and the most outputs (Q, S, H);
// ops.cc checks kOps against them.
constexpr int32_t kMaxInputs = 3;
constexpr int32_t kMaxOutputs = 4;

// Defined per op kind, execution provider and input types; ORT hands callbacks a pointer to `ort`.
struct OpDef {
  OrtCustomOp ort;  // must stay the first member
  const opforge::kernels::OpDesc* desc;  // generated from the spec: name, inputs, attribute, shapes
  CpuKernel cpu;
  const char* provider;               // nullptr: CPU execution provider
  // Declared per input, in the descriptor's order. UNDEFINED (X on the CPU EP): any, checked in
  // Compute with a clear message; the outputs take X's type.
  ONNXTensorElementDataType input_types[kMaxInputs];
  // Declared per output (output_types in ops.cc): X's (UNDEFINED on the CPU EP), a fixed type
  // (RMSNormQuant's float32 scale), or, for an output whose type an attribute picks, that
  // attribute's default: ORT's custom-op API fixes every output's type when the op is registered.
  ONNXTensorElementDataType output_types[kMaxOutputs];

  ONNXTensorElementDataType x_type() const { return input_types[0]; }
};

// One per graph node; immutable after creation, so one session serves many threads.
struct Kernel {
  const OrtApi* api;
  const OpDef* def;
  std::string node;
  opforge::kernels::AttrValues attrs;  // the op's attributes (Swish: beta, RMSNorm: epsilon, ...)

  const char* op_name() const { return def->desc->name; }
  bool on_cuda() const { return def->provider != nullptr; }
  // "opforge.<Op>: <what>: expected <expected>, got <got> (node "<name>")"
  OrtStatus* fail(const std::string& what, const std::string& expected, const std::string& got) const;
  // A canonical message made elsewhere (kernels attrs.h), with the node name appended.
  OrtStatus* fail(const std::string& canonical) const;
};

struct Tensor {
  ONNXTensorElementDataType type = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  std::vector<int64_t> shape;
  int64_t size = 0;
  const void* data = nullptr;  // nullptr when empty
};

std::string type_name(ONNXTensorElementDataType type);
inline int32_t rank(const Tensor& t) { return static_cast<int32_t>(t.shape.size()); }
std::string shape_str(const std::vector<int64_t>& shape);
// The index-th name of a descriptor's list ("X, R, W", "Y, H"); empty past its end.
std::string nth_name(const char* names, size_t index);

OrtStatus* read_input(const Kernel& k, OrtKernelContext* ctx, size_t index, Tensor& out);
// Allocates output `index` with `shape`; *data stays nullptr for an empty tensor.
OrtStatus* alloc_output(const Kernel& k, OrtKernelContext* ctx, size_t index, const std::vector<int64_t>& shape,
                        void** data);

#define OPFORGE_TRY(expr)                     \
  do {                                        \
    if (OrtStatus* status_ = (expr)) return status_; \
  } while (0)

// Runs body(begin, end) over [0, total) in chunks of about `grain` items on the session's
// intra-op thread pool (KernelContext_ParallelFor, API 17); small work runs inline.
template <class Body>
OrtStatus* parallel_for(const OrtApi& api, OrtKernelContext* ctx, int64_t total, int64_t grain, Body&& body) {
  const int64_t chunks = (total + grain - 1) / grain;
  if (chunks <= 1) {
    body(int64_t{0}, total);
    return nullptr;
  }
  struct Job {
    Body* body;
    int64_t total, per_chunk;
  } job{&body, total, (total + chunks - 1) / chunks};
  auto run_chunk = [](void* data, size_t chunk) {
    const Job& j = *static_cast<const Job*>(data);
    const int64_t begin = static_cast<int64_t>(chunk) * j.per_chunk;
    const int64_t end = begin + j.per_chunk < j.total ? begin + j.per_chunk : j.total;
    if (begin < end) (*j.body)(begin, end);
  };
  return api.KernelContext_ParallelFor(ctx, run_chunk, static_cast<size_t>(chunks), 0, &job);
}

}  // namespace opforge_ort
