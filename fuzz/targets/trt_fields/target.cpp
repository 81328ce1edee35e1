// Fuzz target: bytes -> a TensorRT PluginFieldCollection -> every opforge creator's createPlugin,
// in the build phase (ONNX node attributes) and the runtime phase (an engine's serialized state),
// the way TensorRT calls them: through getCreators() and setLoggerFinder().
//
// Input format (every read past the end gives 0):
//   byte 0       flags: bit 0 pass a NULL collection, bit 1 pass a NULL field array
//   byte 1       count, int8: < 0 is passed as nbFields as is (with no fields); else
//                min(count, kMaxFields) fields follow and nbFields is their number
//   per field    name selector (kNames; kCustomName: then a length byte and that many bytes),
//                type byte (low 4 bits: PluginFieldType; bit 7: data = NULL), length (int8),
//                8 payload bytes: the start of the field's data
// The data buffer holds exactly `length` elements of the field's type (none when length <= 0),
// as TensorRT guarantees, so ASan reports any read the field does not promise.
//
// Oracles beyond the sanitizers: a refusal logs an error; an accepted plugin holds values the
// shared attribute rule admits and that the fields gave (or the default, at build time only),
// never comes from a collection with a repeated field, and at runtime only from exactly the
// serialized fields (each attribute and format_version); its serialized fields rebuild an equal plugin, and so does clone(),
// with the op's output count (Y[, H]). Every op of the spec (kOps) is run, its creator declaring exactly its attributes.
#include <NvInferRuntime.h>

#include <opforge/kernels/attrs.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

extern "C" nvinfer1::IPluginCreatorInterface* const* getCreators(int32_t& nbCreators) noexcept;
extern "C" void setLoggerFinder(nvinfer1::ILoggerFinder* finder) noexcept;

namespace {

using nvinfer1::PluginField;
using nvinfer1::PluginFieldCollection;
using nvinfer1::PluginFieldType;
using nvinfer1::TensorRTPhase;
namespace kernels = opforge::kernels;

constexpr int kMaxFields = 8;
constexpr size_t kPayload = 8;
constexpr const char* kNames[] = {"beta",        "epsilon",     "format_version", nullptr, "",
                                  "plugin_version", "betax", "quant_dtype",   "scale_ub"};
constexpr uint8_t kCustomName = sizeof kNames / sizeof kNames[0];
constexpr uint8_t kNullData = 0x80;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "trt_fields: %s\n", what);
  std::abort();
}

// Counts errors instead of printing them: a target must not print per input.
struct CountingLogger : nvinfer1::ILogger {
  int errors = 0;
  void log(Severity severity, const char*) noexcept override {
    if (severity <= Severity::kERROR) ++errors;
  }
} g_logger;
struct Finder : nvinfer1::ILoggerFinder {
  nvinfer1::ILogger* findLogger() noexcept override { return &g_logger; }
} g_finder;

class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  void bytes(uint8_t* out, size_t n) {
    for (size_t i = 0; i < n; ++i) out[i] = byte();
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

size_t element_size(PluginFieldType type) {
  switch (type) {
    case PluginFieldType::kFLOAT64: case PluginFieldType::kINT64: return 8;
    case PluginFieldType::kFLOAT32: case PluginFieldType::kINT32: return 4;
    case PluginFieldType::kFLOAT16: case PluginFieldType::kBF16: case PluginFieldType::kINT16: return 2;
    case PluginFieldType::kDIMS: return sizeof(nvinfer1::Dims);
    default: return 1;
  }
}

// Owns what the decoded collection points at.
struct Decoded {
  std::vector<std::unique_ptr<std::string>> names;
  std::vector<std::unique_ptr<uint8_t[]>> buffers;
  std::vector<PluginField> fields;
  PluginField spare{};  // the array of an empty collection (nbFields 0 or < 0) that is not NULL
  PluginFieldCollection collection{};
  const PluginFieldCollection* passed = nullptr;
};

const char* decode_name(Reader& in, Decoded& out) {
  const uint8_t selector = in.byte() % (kCustomName + 1);
  if (selector < kCustomName) return kNames[selector];
  auto name = std::make_unique<std::string>(in.byte() % 33, '\0');
  in.bytes(reinterpret_cast<uint8_t*>(name->data()), name->size());
  out.names.push_back(std::move(name));
  return out.names.back()->c_str();
}

PluginField decode_field(Reader& in, Decoded& out) {
  const char* name = decode_name(in, out);
  const uint8_t type_byte = in.byte();
  const auto type = static_cast<PluginFieldType>(type_byte & 0x0f);
  const int32_t length = static_cast<int8_t>(in.byte());
  uint8_t payload[kPayload];
  in.bytes(payload, kPayload);
  const size_t size = element_size(type) * static_cast<size_t>(length > 0 ? length : 0);
  // new[] of 0 bytes is a distinct pointer ASan guards: reading it is a report, as it should be.
  std::unique_ptr<uint8_t[]> buffer(new uint8_t[size]());
  std::memcpy(buffer.get(), payload, size < kPayload ? size : kPayload);
  const void* data = (type_byte & kNullData) ? nullptr : buffer.get();
  out.buffers.push_back(std::move(buffer));
  return PluginField(name, data, type, length);
}

void decode(const uint8_t* data, size_t size, Decoded& out) {
  Reader in(data, size);
  const uint8_t flags = in.byte();
  const int32_t count = static_cast<int8_t>(in.byte());
  for (int32_t i = 0; i < count && i < kMaxFields; ++i) out.fields.push_back(decode_field(in, out));
  out.collection.nbFields = count < 0 ? count : static_cast<int32_t>(out.fields.size());
  PluginField* array = out.fields.empty() ? &out.spare : out.fields.data();
  out.collection.fields = (flags & 2) ? nullptr : array;
  out.passed = (flags & 1) ? nullptr : &out.collection;
}

// ---- the oracle: what a correct creator may accept ------------------------------------------
struct Expectation {
  bool well_formed = false;  // collection, array and every name present; nbFields >= 0
  int attr_count[kernels::kMaxAttrs] = {};
  int format_count = 0, unknown_count = 0;
  const PluginField* attr[kernels::kMaxAttrs] = {};
};

int attr_index_of(const kernels::OpDesc& op, const char* name) {
  for (int32_t a = 0; a < op.nb_attrs; ++a)
    if (std::strcmp(name, op.attrs[a]->name) == 0) return a;
  return -1;
}

Expectation expect_from(const Decoded& in, const kernels::OpDesc& op) {
  Expectation e;
  const PluginFieldCollection* fc = in.passed;
  if (fc == nullptr) {  // no collection: no fields
    e.well_formed = true;
    return e;
  }
  if (fc->nbFields < 0 || (fc->nbFields > 0 && fc->fields == nullptr)) return e;
  for (int32_t i = 0; i < fc->nbFields; ++i) {
    const PluginField& f = fc->fields[i];
    if (f.name == nullptr) return e;
    if (const int a = attr_index_of(op, f.name); a >= 0) ++e.attr_count[a], e.attr[a] = &f;
    else if (std::strcmp(f.name, "format_version") == 0) ++e.format_count;
    else ++e.unknown_count;
  }
  e.well_formed = true;
  return e;
}

bool is_float(const kernels::AttrSpec& attr) { return attr.type == kernels::AttrType::kFloat; }

// One serialized field: an attribute's value into `values` (float32, or int32 for an int or enum
// attribute), or format_version checked.
void read_serialized_field(const kernels::OpDesc& op, const PluginField& f, kernels::AttrValues* values,
                           int* attrs_seen, bool* format_seen) {
  if (f.name == nullptr || f.data == nullptr || f.length != 1) fail("malformed serialized field");
  const int a = attr_index_of(op, f.name);
  if (a >= 0 && is_float(*op.attrs[a]) && f.type == PluginFieldType::kFLOAT32) {
    std::memcpy(&values->v[a], f.data, sizeof(float));
    ++*attrs_seen;
  } else if (a >= 0 && !is_float(*op.attrs[a]) && f.type == PluginFieldType::kINT32) {
    int32_t v;
    std::memcpy(&v, f.data, sizeof v);
    values->v[a] = static_cast<float>(v);
    ++*attrs_seen;
  } else if (std::strcmp(f.name, "format_version") == 0 && f.type == PluginFieldType::kINT32) {
    int32_t version;
    std::memcpy(&version, f.data, sizeof version);
    if (version < 1 || version > OPFORGE_TRT_FORMAT_VERSION) fail("serialized format_version out of range");
    *format_seen = true;
  }
}

kernels::AttrValues attributes_of(nvinfer1::IPluginV3* plugin, const kernels::OpDesc& op,
                                  PluginFieldCollection* serialized_out) {
  auto* runtime = static_cast<nvinfer1::IPluginV3OneRuntime*>(
      plugin->getCapabilityInterface(nvinfer1::PluginCapabilityType::kRUNTIME));
  if (runtime == nullptr) fail("no runtime capability");
  const PluginFieldCollection* fc = runtime->getFieldsToSerialize();
  if (fc == nullptr || fc->nbFields != op.nb_attrs + 1 || fc->fields == nullptr)
    fail("serialized fields are not the attributes and format_version");
  kernels::AttrValues values;
  int attrs_seen = 0;
  bool format_seen = false;
  for (int32_t i = 0; i < fc->nbFields; ++i) read_serialized_field(op, fc->fields[i], &values, &attrs_seen, &format_seen);
  if (attrs_seen != op.nb_attrs || !format_seen) fail("serialized fields lack an attribute or format_version");
  if (serialized_out != nullptr) *serialized_out = *fc;
  return values;
}

float given_value(const PluginField& f) {
  if (f.type == PluginFieldType::kINT32 || f.type == PluginFieldType::kINT64) {
    int64_t v = 0;
    if (f.type == PluginFieldType::kINT32) {
      int32_t narrow;
      std::memcpy(&narrow, f.data, sizeof narrow);
      v = narrow;
    } else {
      std::memcpy(&v, f.data, sizeof v);
    }
    return static_cast<float>(v);  // accepted, hence |v| <= 2^24: exact in float32
  }
  if (f.type == PluginFieldType::kFLOAT32) {
    float v;
    std::memcpy(&v, f.data, sizeof v);
    return v;
  }
  double d;
  std::memcpy(&d, f.data, sizeof d);
  return static_cast<float>(d);  // accepted, hence finite in float32: the cast is defined
}

bool same_bits(const kernels::AttrValues& a, const kernels::AttrValues& b, int32_t count) {
  return std::memcmp(a.v, b.v, sizeof(float) * count) == 0;
}

using Owned = std::unique_ptr<nvinfer1::IPluginV3>;

// What the plugin must hold: each attribute the fields gave, else its default.
kernels::AttrValues expected_values(const kernels::OpDesc& op, const Expectation& e) {
  kernels::AttrValues expected;
  for (int32_t a = 0; a < op.nb_attrs; ++a) {
    const PluginField* f = e.attr[a];
    const bool float_attr = is_float(*op.attrs[a]);
    const PluginFieldType wide = float_attr ? PluginFieldType::kFLOAT64 : PluginFieldType::kINT64;
    const PluginFieldType narrow = float_attr ? PluginFieldType::kFLOAT32 : PluginFieldType::kINT32;
    if (f != nullptr && (f->data == nullptr || f->length != 1 || (f->type != narrow && f->type != wide)))
      fail("accepted an attribute field that is not one value of the attribute's type (float32/64, int32/64)");
    expected.v[a] = f != nullptr ? given_value(*f) : static_cast<float>(op.attrs[a]->default_value);
  }
  return expected;
}

void check_field_counts(const kernels::OpDesc& op, const Expectation& e, TensorRTPhase phase) {
  if (!e.well_formed || e.format_count > 1) fail("accepted a malformed or repeated field set");
  for (int32_t a = 0; a < op.nb_attrs; ++a) {
    if (e.attr_count[a] > 1) fail("accepted a malformed or repeated field set");
    if (phase == TensorRTPhase::kRUNTIME && e.attr_count[a] != 1) fail("accepted an incomplete serialized state");
  }
  if (phase == TensorRTPhase::kRUNTIME && (e.format_count != 1 || e.unknown_count != 0))
    fail("accepted an incomplete or foreign serialized state");
}

// An accepted plugin: check it against the oracle, then its serialization round trip and clone.
void check_accepted(nvinfer1::IPluginCreatorV3One* creator, const kernels::OpDesc& op, Owned plugin,
                    const Expectation& e, TensorRTPhase phase) {
  check_field_counts(op, e, phase);
  const kernels::AttrValues expected = expected_values(op, e);
  PluginFieldCollection serialized{};
  const kernels::AttrValues values = attributes_of(plugin.get(), op, &serialized);
  for (int32_t a = 0; a < op.nb_attrs; ++a)
    if (!kernels::attr_valid(*op.attrs[a], values[a])) fail("accepted a value the attribute rule refuses");
  if (!same_bits(values, expected, op.nb_attrs)) fail("the plugin holds another value than the fields gave");

  Owned again(creator->createPlugin("fuzz", &serialized, TensorRTPhase::kRUNTIME));
  if (!again) fail("its own serialized fields were refused");
  plugin.reset();  // the second plugin must not depend on the first
  if (!same_bits(attributes_of(again.get(), op, nullptr), expected, op.nb_attrs)) fail("round trip changed the value");
  Owned copy(again->clone());
  if (!copy || !same_bits(attributes_of(copy.get(), op, nullptr), expected, op.nb_attrs))
    fail("clone changed the value");
  auto* build = static_cast<nvinfer1::IPluginV3OneBuild*>(copy->getCapabilityInterface(nvinfer1::PluginCapabilityType::kBUILD));
  if (build == nullptr || build->getNbOutputs() != op.nb_outputs) fail("the plugin has another output count than its op");
}

void run_creator(nvinfer1::IPluginCreatorV3One* creator, const kernels::OpDesc& op, const Decoded& in) {
  const Expectation e = expect_from(in, op);
  for (TensorRTPhase phase : {TensorRTPhase::kBUILD, TensorRTPhase::kRUNTIME}) {
    const int errors_before = g_logger.errors;
    Owned plugin(creator->createPlugin("fuzz", in.passed, phase));
    if (!plugin) {
      if (g_logger.errors == errors_before) fail("refused without logging an error");
      continue;
    }
    check_accepted(creator, op, std::move(plugin), e, phase);
  }
}

bool selectable(const char* name) {
  for (const char* known : kNames)
    if (known != nullptr && std::strcmp(known, name) == 0) return true;
  return false;
}

// The creator declares exactly the op's attributes, each of which an input can name (kNames).
void check_declared_fields(nvinfer1::IPluginCreatorV3One* creator, const kernels::OpDesc& op) {
  const PluginFieldCollection* declared = creator->getFieldNames();
  if (declared == nullptr || declared->nbFields != op.nb_attrs) fail("getFieldNames is not the op's attributes");
  for (int32_t a = 0; a < op.nb_attrs; ++a) {
    if (std::strcmp(declared->fields[a].name, op.attrs[a]->name) != 0) fail("getFieldNames is not the op's attributes");
    if (!selectable(op.attrs[a]->name)) fail((std::string("kNames lacks the attribute ") + op.attrs[a]->name).c_str());
  }
}

// One creator per op of the spec (kOps), in kOps' order.
std::vector<nvinfer1::IPluginCreatorV3One*> find_creators() {
  setLoggerFinder(&g_finder);
  int32_t n = 0;
  nvinfer1::IPluginCreatorInterface* const* all = getCreators(n);
  std::vector<nvinfer1::IPluginCreatorV3One*> found;
  for (const kernels::OpDesc* op : kernels::kOps) {
    nvinfer1::IPluginCreatorV3One* match = nullptr;
    for (int32_t i = 0; i < n; ++i) {
      auto* creator = static_cast<nvinfer1::IPluginCreatorV3One*>(all[i]);
      if (std::strcmp(creator->getPluginName(), op->name) == 0) match = creator;
    }
    if (match == nullptr) fail((std::string("getCreators lacks ") + op->name).c_str());
    check_declared_fields(match, *op);
    found.push_back(match);
  }
  return found;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<nvinfer1::IPluginCreatorV3One*> creators = find_creators();
  Decoded in;
  decode(data, size, in);
  for (size_t i = 0; i < creators.size(); ++i) run_creator(creators[i], *kernels::kOps[i], in);
  return 0;
}
