// libops_opforge_nn.so.1: Swish, RMSNorm and SwiGLU on the SDK, calling the shared kernels (the
// single source of op math) and declared from the descriptors generated from the op spec (names,
// domain, version, attributes). Runs single-threaded: threading is the host engine's job.
#include <opforge/kernels/attrs.h>
#include <opforge/kernels/cpu.h>
#include <opforge/plugin.h>

#include <cstdio>
#include <new>
#include <string>

namespace {

namespace k = opforge::kernels;

const int32_t kTypes[] = {OPFORGE_DTYPE_FLOAT32, OPFORGE_DTYPE_FLOAT64, OPFORGE_DTYPE_BFLOAT16};
const OpforgeIODesc kSwishIn[] = {{"X", 3, kTypes}};
const OpforgeIODesc kRmsIn[] = {{"X", 3, kTypes}, {"W", 3, kTypes}};
const OpforgeIODesc kOut[] = {{"Y", 3, kTypes}};
constexpr OpforgeAttrSchema float_attr(const k::AttrSpec& a) {
  return {a.name, OPFORGE_ATTR_FLOAT, 0, a.default_value, 0, nullptr, a.doc};
}
const OpforgeAttrSchema kSwishAttrs[] = {float_attr(k::kSwishBeta)};
const OpforgeAttrSchema kRmsAttrs[] = {float_attr(k::kRMSNormEpsilon)};
const OpforgeAttrSchema kSwiGLUAttrs[] = {float_attr(k::kSwiGLUBeta)};

struct Params {
  float value;  // beta or epsilon
};

int32_t fail(char* err, size_t len, const std::string& msg) {
  std::snprintf(err, len, "%s", msg.c_str());
  return OPFORGE_ERR_INVALID_ARGUMENT;
}

std::string shape_of(const OpforgeTensor& t) {
  std::string s = "[";
  for (int32_t i = 0; i < t.rank; ++i) s += (i ? ", " : "") + std::to_string(t.shape[i]);
  return s + "]";
}

int64_t numel(const OpforgeTensor& t) {
  int64_t n = 1;
  for (int32_t i = 0; i < t.rank; ++i) n *= t.shape[i];
  return n;
}

const char* dtype_name(int32_t dt) {
  return dt == OPFORGE_DTYPE_FLOAT32 ? "float32" : dt == OPFORGE_DTYPE_FLOAT64 ? "float64" : dt == OPFORGE_DTYPE_BFLOAT16 ? "bfloat16" : "other";
}

// The host hands attributes over as doubles; the kernels compute with float32, so the shared rule
// (attrs.h) refuses any value that is not finite once rounded to float32, with the common message.
int32_t create_with(const k::AttrSpec& attr, const OpforgeAttrValue& value, void** inst, char* err, size_t len) {
  const std::string error = k::attr_error(attr, value.f);
  if (!error.empty()) return fail(err, len, error);
  *inst = new (std::nothrow) Params{static_cast<float>(value.f)};
  return *inst ? OPFORGE_OK : OPFORGE_ERR_OUT_OF_MEMORY;
}

int32_t create_swish(const OpforgeAttrValue* a, uint32_t, void** inst, char* err, size_t len) {
  return create_with(k::kSwishBeta, a[0], inst, err, len);
}

int32_t create_rms(const OpforgeAttrValue* a, uint32_t, void** inst, char* err, size_t len) {
  return create_with(k::kRMSNormEpsilon, a[0], inst, err, len);
}

int32_t create_swiglu(const OpforgeAttrValue* a, uint32_t, void** inst, char* err, size_t len) {
  return create_with(k::kSwiGLUBeta, a[0], inst, err, len);
}

void destroy(void* inst) { delete static_cast<Params*>(inst); }

void same_as(const OpforgeTensor& x, OpforgeTensorDesc* out) {
  out->dtype = x.dtype;
  out->rank = x.rank;
  for (int32_t i = 0; i < x.rank; ++i) out->shape[i] = x.shape[i];
}

bool output_matches(const char* op, const OpforgeTensor& x, const OpforgeTensor& y, char* err, size_t len) {
  if (y.dtype == x.dtype && numel(y) == numel(x) && (numel(y) == 0 || y.data)) return true;
  fail(err, len, std::string("opforge.") + op + ": Y: expected " + dtype_name(x.dtype) + " output of shape " + shape_of(x) +
                     ", got " + dtype_name(y.dtype) + " of shape " + shape_of(y));
  return false;
}

int32_t swish_shapes(void*, const OpforgeTensor* in, uint32_t, OpforgeTensorDesc* out, uint32_t, char*, size_t) {
  same_as(in[0], out);
  return OPFORGE_OK;
}

int32_t swish_compute(void* inst, const OpforgeTensor* in, uint32_t, OpforgeTensor* out, uint32_t, char* err, size_t len) {
  if (!output_matches("Swish", in[0], out[0], err, len)) return OPFORGE_ERR_INVALID_ARGUMENT;
  const float beta = static_cast<Params*>(inst)->value;
  const int64_t n = numel(in[0]);
  if (n == 0) return OPFORGE_OK;
  switch (in[0].dtype) {
    case OPFORGE_DTYPE_FLOAT32: k::cpu::swish_forward(static_cast<const float*>(in[0].data), static_cast<float*>(out[0].data), n, beta); break;
    case OPFORGE_DTYPE_FLOAT64: k::cpu::swish_forward(static_cast<const double*>(in[0].data), static_cast<double*>(out[0].data), n, beta); break;
    default: k::cpu::swish_forward(static_cast<const k::bfloat16*>(in[0].data), static_cast<k::bfloat16*>(out[0].data), n, beta);
  }
  return OPFORGE_OK;
}

int32_t rms_shapes(void*, const OpforgeTensor* in, uint32_t, OpforgeTensorDesc* out, uint32_t, char* err, size_t len) {
  const OpforgeTensor& x = in[0];
  const OpforgeTensor& w = in[1];
  if (x.rank < 1) return fail(err, len, k::error_text(k::kRMSNormOp.name, "X", k::kRankAtLeast1, "rank 0"));
  const int64_t cols = x.shape[x.rank - 1];
  if (w.rank != 1 || w.shape[0] != cols)
    return fail(err, len, k::error_text(k::kRMSNormOp.name, "W",
                                        k::kRMSNormWeightExpected + std::to_string(cols) + k::kRMSNormWeightSuffix,
                                        "shape " + shape_of(w)));
  if (w.dtype != x.dtype)
    return fail(err, len, std::string("opforge.RMSNorm: W: expected dtype ") + dtype_name(x.dtype) + " (same as X), got " + dtype_name(w.dtype));
  same_as(x, out);
  return OPFORGE_OK;
}

int32_t rms_compute(void* inst, const OpforgeTensor* in, uint32_t n_in, OpforgeTensor* out, uint32_t n_out, char* err, size_t len) {
  OpforgeTensorDesc desc;
  int32_t status = rms_shapes(inst, in, n_in, &desc, n_out, err, len);
  if (status != OPFORGE_OK) return status;
  if (!output_matches("RMSNorm", in[0], out[0], err, len)) return OPFORGE_ERR_INVALID_ARGUMENT;
  const float eps = static_cast<Params*>(inst)->value;
  const int64_t cols = in[0].shape[in[0].rank - 1];
  const int64_t rows = cols == 0 ? 0 : numel(in[0]) / cols;
  if (rows == 0) return OPFORGE_OK;
  switch (in[0].dtype) {
    case OPFORGE_DTYPE_FLOAT32:
      k::cpu::rms_norm_forward(static_cast<const float*>(in[0].data), static_cast<const float*>(in[1].data), static_cast<float*>(out[0].data), 0, rows, cols, eps);
      break;
    case OPFORGE_DTYPE_FLOAT64:
      k::cpu::rms_norm_forward(static_cast<const double*>(in[0].data), static_cast<const double*>(in[1].data), static_cast<double*>(out[0].data), 0, rows, cols, eps);
      break;
    default:
      k::cpu::rms_norm_forward(static_cast<const k::bfloat16*>(in[0].data), static_cast<const k::bfloat16*>(in[1].data), static_cast<k::bfloat16*>(out[0].data), 0, rows, cols, eps);
  }
  return OPFORGE_OK;
}

// X [..., 2d] -> Y [..., d]
int32_t swiglu_shapes(void*, const OpforgeTensor* in, uint32_t, OpforgeTensorDesc* out, uint32_t, char* err, size_t len) {
  const OpforgeTensor& x = in[0];
  const int64_t last = x.rank >= 1 ? x.shape[x.rank - 1] : 0;
  if (x.rank < 1 || last < 2 || last % 2 != 0)
    return fail(err, len, k::error_text(k::kSwiGLUOp.name, "X", k::kSwiGLUXExpected,
                                        x.rank < 1 ? std::string("rank 0") : "shape " + shape_of(x)));
  same_as(x, out);
  out->shape[x.rank - 1] = last / 2;
  return OPFORGE_OK;
}

int32_t swiglu_compute(void* inst, const OpforgeTensor* in, uint32_t n_in, OpforgeTensor* out, uint32_t n_out, char* err,
                       size_t len) {
  OpforgeTensorDesc desc;
  int32_t status = swiglu_shapes(inst, in, n_in, &desc, n_out, err, len);
  if (status != OPFORGE_OK) return status;
  const OpforgeTensor& y = out[0];
  const int64_t d = desc.shape[desc.rank - 1];
  const int64_t rows = numel(in[0]) / (2 * d);
  if (y.dtype != in[0].dtype || numel(y) != rows * d || (rows > 0 && !y.data)) {
    OpforgeTensor want = in[0];
    want.shape = desc.shape;
    return fail(err, len, std::string("opforge.SwiGLU: Y: expected ") + dtype_name(in[0].dtype) + " output of shape " +
                              shape_of(want) + ", got " + dtype_name(y.dtype) + " of shape " + shape_of(y));
  }
  if (rows == 0) return OPFORGE_OK;
  const float beta = static_cast<Params*>(inst)->value;
  switch (in[0].dtype) {
    case OPFORGE_DTYPE_FLOAT32: k::cpu::swiglu_forward(static_cast<const float*>(in[0].data), static_cast<float*>(y.data), 0, rows, d, beta); break;
    case OPFORGE_DTYPE_FLOAT64: k::cpu::swiglu_forward(static_cast<const double*>(in[0].data), static_cast<double*>(y.data), 0, rows, d, beta); break;
    default: k::cpu::swiglu_forward(static_cast<const k::bfloat16*>(in[0].data), static_cast<k::bfloat16*>(y.data), 0, rows, d, beta);
  }
  return OPFORGE_OK;
}

// Names, domain, version, inputs and docs from the generated descriptors (attrs.h).
const OpforgeOpDef kOps[] = {
    {k::kDomain, k::kSwishOp.name, k::kDomainVersion, 0, k::kSwishOp.doc, 1, kSwishIn, 1, kOut, 1, kSwishAttrs,
     create_swish, destroy, swish_shapes, swish_compute},
    {k::kDomain, k::kRMSNormOp.name, k::kDomainVersion, 0, k::kRMSNormOp.doc, 2, kRmsIn, 1, kOut, 1, kRmsAttrs,
     create_rms, destroy, rms_shapes, rms_compute},
    {k::kDomain, k::kSwiGLUOp.name, k::kDomainVersion, 0, k::kSwiGLUOp.doc, 1, kSwishIn, 1, kOut, 1, kSwiGLUAttrs,
     create_swiglu, destroy, swiglu_shapes, swiglu_compute},
};

const OpforgePlugin kPlugin = {OPFORGE_PLUGIN_API_VERSION, sizeof(OpforgePlugin), "opforge_nn", OPFORGE_PLUGIN_VERSION,
                               sizeof kOps / sizeof kOps[0], kOps, nullptr, nullptr};

}  // namespace

extern "C" OPFORGE_PLUGIN_EXPORT const OpforgePlugin* opforge_plugin_entry(void) { return &kPlugin; }
