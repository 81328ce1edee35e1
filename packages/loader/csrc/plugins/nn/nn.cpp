// libops_opforge_nn.so.1: every op of the spec on the SDK, calling the shared kernels (the
// single source of op math) and declared from the descriptors generated from the op spec (names,
// domain, version, attributes). Runs single-threaded: threading is the host engine's job.
#include <opforge/kernels/cpu_ops.h>
#include <opforge/kernels/shapes.h>
#include <opforge/plugin.h>

#include <array>
#include <cstddef>
#include <cstdio>
#include <new>
#include <string>
#include <utility>

namespace {

namespace k = opforge::kernels;

const int32_t kTypes[] = {OPFORGE_DTYPE_FLOAT32, OPFORGE_DTYPE_FLOAT64, OPFORGE_DTYPE_BFLOAT16};
// The input tensors by position, as the descriptors define them (shapes.h): X[, R][, W].
const OpforgeIODesc kInputsX[] = {{"X", 3, kTypes}};
const OpforgeIODesc kInputsXW[] = {{"X", 3, kTypes}, {"W", 3, kTypes}};
const OpforgeIODesc kInputsXRW[] = {{"X", 3, kTypes}, {"R", 3, kTypes}, {"W", 3, kTypes}};
constexpr size_t kMaxOutputs = 4;
constexpr size_t kMaxChoices = 8;  // the most values of an enum attribute that picks an output's dtype

constexpr const OpforgeIODesc* inputs_of(const k::OpDesc& op) {
  return k::has_residual(op) ? kInputsXRW : k::has_weight(op) ? kInputsXW : kInputsX;
}

struct Params {
  k::AttrValues attrs;  // the op's attributes (beta, epsilon, ...), in its descriptor's order
};

// The outputs as the descriptors define them (OutputDesc): each one's name and the dtypes it may
// have: X's (any input dtype), its fixed dtype, or the choices of the enum attribute that picks it
// (the SDK's dtypes are ONNX codes, as ElemType's are).
struct OutputTable {
  int32_t dtypes[kMaxOutputs][kMaxChoices] = {};
  OpforgeIODesc descs[kMaxOutputs] = {};
};

constexpr bool choices_fit() {
  for (const k::OpDesc* op : k::kOps)
    for (int32_t a = 0; a < op->nb_attrs; ++a)
      if (op->attrs[a]->nb_choices > static_cast<int32_t>(kMaxChoices)) return false;
  return true;
}
static_assert(choices_fit(), "an enum attribute has more choices than OutputTable holds: raise kMaxChoices");

uint32_t output_dtypes(const k::OpDesc& op, int32_t i, int32_t* out) {
  const k::OutputDesc& o = op.output_descs[i];
  if (o.dtype_attr >= 0) {
    const k::AttrSpec& attr = *op.attrs[o.dtype_attr];
    for (int32_t c = 0; c < attr.nb_choices; ++c) out[c] = attr.choices[c].value;
    return static_cast<uint32_t>(attr.nb_choices);
  }
  if (o.dtype != k::ElemType::kLikeX) {
    out[0] = static_cast<int32_t>(o.dtype);
    return 1;
  }
  for (size_t c = 0; c < 3; ++c) out[c] = kTypes[c];
  return 3;
}

// Filled in place: each desc points into the table's own dtypes (a table built elsewhere and copied
// in kept pointers into the copy's source; the zig-built plugin declared garbage dtypes).
template <class Op>
const OpforgeIODesc* outputs_of() {
  static OutputTable table;
  static const bool filled = [] {
    for (int32_t i = 0; i < Op::desc.nb_outputs; ++i)
      table.descs[i] = {Op::desc.output_descs[i].name, output_dtypes(Op::desc, i, table.dtypes[i]), table.dtypes[i]};
    return true;
  }();
  (void)filled;
  return table.descs;
}

// Output i's dtype for X's dtype and the instance's attributes.
int32_t output_dtype(const k::OpDesc& op, int32_t i, int32_t x_dtype, const k::AttrValues& attrs) {
  const k::ElemType elem = k::output_elem_type(op, i, attrs);
  return elem == k::ElemType::kLikeX ? x_dtype : static_cast<int32_t>(elem);
}

int32_t fail(char* err, size_t len, const std::string& msg) {
  std::snprintf(err, len, "%s", msg.c_str());
  return OPFORGE_ERR_INVALID_ARGUMENT;
}

std::string shape_of(int32_t rank, const int64_t* shape) { return k::shape_text(shape, rank); }

const char* dtype_name(int32_t dt) {
  switch (dt) {
    case OPFORGE_DTYPE_FLOAT32: return "float32";
    case OPFORGE_DTYPE_FLOAT64: return "float64";
    case OPFORGE_DTYPE_BFLOAT16: return "bfloat16";
    case OPFORGE_DTYPE_INT8: return "int8";
    case OPFORGE_DTYPE_FLOAT8E4M3FN: return "float8_e4m3fn";
    default: return "other";
  }
}

void destroy(void* inst) { delete static_cast<Params*>(inst); }

// ---- every op, from its descriptor and its kernel binding (kernels/ cpu_ops.h) ----------------

// The host hands attributes over as doubles; the kernels compute with float32, so the shared rule
// (attrs.h) refuses any value that is not finite once rounded to float32, with the common message.
template <class Op>
int32_t create(const OpforgeAttrValue* a, uint32_t, void** inst, char* err, size_t len) {
  double values[k::kMaxAttrs] = {};
  for (int32_t i = 0; i < Op::desc.nb_attrs; ++i)
    values[i] = Op::desc.attrs[i]->type == k::AttrType::kFloat ? a[i].f : static_cast<double>(a[i].i);
  const std::string error = k::attrs_error(Op::desc, values);
  if (!error.empty()) return fail(err, len, error);
  Params params;
  for (int32_t i = 0; i < Op::desc.nb_attrs; ++i) params.attrs.v[i] = static_cast<float>(values[i]);
  *inst = new (std::nothrow) Params{params};
  return *inst ? OPFORGE_OK : OPFORGE_ERR_OUT_OF_MEMORY;
}

std::string same_dtype_error(const k::OpDesc& op, const char* name, const OpforgeTensor& x, const OpforgeTensor& t) {
  if (t.dtype == x.dtype) return {};
  return k::error_text(op.name, name, std::string("dtype ") + dtype_name(x.dtype) + " (same as X)", dtype_name(t.dtype));
}

std::string input_error(const k::OpDesc& op, const OpforgeTensor* in) {
  const OpforgeTensor& x = in[0];
  std::string error = k::x_shape_error(op, x.shape, x.rank);
  if (error.empty() && k::has_residual(op)) {
    const OpforgeTensor& r = in[1];
    error = k::r_shape_error(op, x.shape, x.rank, r.shape, r.rank);
    if (error.empty()) error = same_dtype_error(op, "R", x, r);
  }
  if (error.empty() && k::has_weight(op)) {
    const OpforgeTensor& w = in[op.nb_inputs - 1];
    error = k::w_shape_error(op, x.shape, x.rank, w.shape, w.rank);
    if (error.empty()) error = k::weight_dtype_error(op, k::ElemType(x.dtype), k::ElemType(w.dtype));  // ONNX codes both
  }
  return error;
}

// A mixed-dtype call (checked inputs): W in float32 with a bfloat16 X.
bool w_is_float32(const k::OpDesc& op, const OpforgeTensor* in) {
  return k::has_weight(op) && in[op.nb_inputs - 1].dtype != in[0].dtype;
}

// Every output by its rule (shapes.h output_shape_at) and its dtype (X's, fixed, or picked by an
// attribute of this instance).
template <class Op>
int32_t shapes(void* inst, const OpforgeTensor* in, uint32_t, OpforgeTensorDesc* out, uint32_t, char* err, size_t len) {
  const std::string error = input_error(Op::desc, in);
  if (!error.empty()) return fail(err, len, error);
  const k::AttrValues& attrs = static_cast<Params*>(inst)->attrs;
  for (int32_t o = 0; o < Op::desc.nb_outputs; ++o) {
    out[o].dtype = output_dtype(Op::desc, o, in[0].dtype, attrs);
    out[o].rank = in[0].rank;
    k::output_shape_at(Op::desc, o, in[0].shape, in[0].rank, out[o].shape);
  }
  return OPFORGE_OK;
}

bool output_matches(const char* op, const char* name, const OpforgeTensorDesc& want, const OpforgeTensor& got,
                    char* err, size_t len) {
  const int64_t n = k::element_count(want.shape, want.rank);
  if (got.dtype == want.dtype && k::element_count(got.shape, got.rank) == n && (n == 0 || got.data)) return true;
  fail(err, len, std::string("opforge.") + op + ": " + name + ": expected " + dtype_name(want.dtype) +
                     " output of shape " + shape_of(want.rank, want.shape) + ", got " + dtype_name(got.dtype) +
                     " of shape " + shape_of(got.rank, got.shape));
  return false;
}

bool all_empty(const OpforgeTensorDesc* outputs, int32_t count) {
  for (int32_t o = 0; o < count; ++o)
    if (k::element_count(outputs[o].shape, outputs[o].rank) != 0) return false;
  return true;
}

template <class T>
const T* tensor_data(const OpforgeTensor& t) {
  return static_cast<const T*>(t.data);
}

// The op's tensors by position (X[, R][, W] -> Y[, H]) into the kernel's arguments; a float32 W of a
// bfloat16 X as w_float32 (w nullptr).
template <class Op, class T>
void run(const OpforgeTensor* in, const OpforgeTensor* out, const k::AttrValues& attrs) {
  constexpr const k::OpDesc& op = Op::desc;
  const k::RowView v = k::row_view(op, in[0].shape, in[0].rank);
  const bool mixed = w_is_float32(op, in);
  k::cpu::Forward<T> args{tensor_data<T>(in[0]),
                          k::has_weight(op) && !mixed ? tensor_data<T>(in[op.nb_inputs - 1]) : nullptr,
                          static_cast<T*>(out[0].data), v.cols, attrs};
  if (mixed) args.w_float32 = tensor_data<float>(in[op.nb_inputs - 1]);
  if (k::has_residual(op)) args.r = tensor_data<T>(in[1]);
  if (op.nb_outputs > 1) args.h = static_cast<T*>(out[1].data);
  void* outputs[kMaxOutputs] = {};  // every output, each of its own dtype (RMSNormQuant's Q and scale)
  for (int32_t o = 0; o < op.nb_outputs; ++o) outputs[o] = out[o].data;
  args.outputs = outputs;
  Op::forward(args, 0, v.rows);
}

template <class Op>
int32_t compute(void* inst, const OpforgeTensor* in, uint32_t n_in, OpforgeTensor* out, uint32_t n_out, char* err,
                size_t len) {
  OpforgeTensorDesc want[kMaxOutputs];
  const int32_t status = shapes<Op>(inst, in, n_in, want, n_out, err, len);
  if (status != OPFORGE_OK) return status;
  for (int32_t o = 0; o < Op::desc.nb_outputs; ++o)
    if (!output_matches(Op::desc.name, Op::desc.output_descs[o].name, want[o], out[o], err, len))
      return OPFORGE_ERR_INVALID_ARGUMENT;
  if (k::row_view(Op::desc, in[0].shape, in[0].rank).rows == 0 || all_empty(want, Op::desc.nb_outputs)) return OPFORGE_OK;  // nothing to write
  const k::AttrValues& attrs = static_cast<Params*>(inst)->attrs;
  switch (in[0].dtype) {
    case OPFORGE_DTYPE_FLOAT32: run<Op, float>(in, out, attrs); break;
    case OPFORGE_DTYPE_FLOAT64: run<Op, double>(in, out, attrs); break;
    default: run<Op, k::bfloat16>(in, out, attrs);
  }
  return OPFORGE_OK;
}

// A float attribute, or an int one (an int or enum attribute of the spec, its default an integer).
constexpr OpforgeAttrSchema attr_schema(const k::AttrSpec& attr) {
  if (attr.type == k::AttrType::kFloat) return {attr.name, OPFORGE_ATTR_FLOAT, 0, attr.default_value, 0, nullptr, attr.doc};
  return {attr.name, OPFORGE_ATTR_INT, 0, 0.0, static_cast<int64_t>(attr.default_value), nullptr, attr.doc};
}

template <class Op, size_t... I>
constexpr std::array<OpforgeAttrSchema, sizeof...(I)> attr_schemas(std::index_sequence<I...>) {
  return {attr_schema(*Op::desc.attrs[I])...};
}

// The op's attributes, in its descriptor's order.
template <class Op>
constexpr auto kAttrs = attr_schemas<Op>(std::make_index_sequence<Op::desc.nb_attrs>{});

// Names, domain, version, inputs, outputs and docs from the generated descriptors (attrs.h).
template <class Op>
OpforgeOpDef op_def() {
  static_assert(Op::desc.nb_outputs <= static_cast<int32_t>(kMaxOutputs), "OutputTable holds every output");
  return {k::kDomain, Op::desc.name, k::kDomainVersion, 0, Op::desc.doc, static_cast<uint32_t>(Op::desc.nb_inputs),
          inputs_of(Op::desc), static_cast<uint32_t>(Op::desc.nb_outputs), outputs_of<Op>(),
          static_cast<uint32_t>(Op::desc.nb_attrs), kAttrs<Op>.data(), create<Op>, destroy, shapes<Op>, compute<Op>};
}

// Every op of the spec (ops_generated.h).
#define OPFORGE_NN_OP_DEF(Name) op_def<k::cpu::Name##Kernel>(),
const OpforgeOpDef kOps[] = {OPFORGE_FOR_EACH_OP(OPFORGE_NN_OP_DEF)};
#undef OPFORGE_NN_OP_DEF

const OpforgePlugin kPlugin = {OPFORGE_PLUGIN_API_VERSION, sizeof(OpforgePlugin), "opforge_nn", OPFORGE_PLUGIN_VERSION,
                               sizeof kOps / sizeof kOps[0], kOps, nullptr, nullptr};

}  // namespace

extern "C" OPFORGE_PLUGIN_EXPORT const OpforgePlugin* opforge_plugin_entry(void) { return &kPlugin; }
