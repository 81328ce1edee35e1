// A stand-in for TensorRT's side of the plugin interface, compiled by the tests against the same
// headers as the library: dlopen (RTLD_NOW | RTLD_LOCAL), setLoggerFinder, getCreators, then one
// named check per run (`trt_host LIBRARY CHECK`). Prints "ok ..." lines; any failure prints
// "FAIL ..." and exits 1. No TensorRT and no GPU needed.
#include <NvInferRuntime.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

using namespace nvinfer1;

namespace {

int g_failures = 0;

void expect(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "ok" : "FAIL", what.c_str());
  if (!ok) ++g_failures;
}

// ---- logger: what the plugins say through setLoggerFinder ------------------------------------
struct CaptureLogger : ILogger {
  std::vector<std::string> lines;
  void log(Severity severity, const char* msg) noexcept override {
    lines.push_back(std::to_string(static_cast<int>(severity)) + " " + msg);
    std::printf("log[%d] %s\n", static_cast<int>(severity), msg);
  }
  bool said(const std::string& text) const {
    for (const auto& l : lines)
      if (l.find(text) != std::string::npos) return true;
    return false;
  }
  bool said_error(const std::string& text) const {
    const std::string error = std::to_string(static_cast<int>(Severity::kERROR)) + " ";
    for (const auto& l : lines)
      if (l.compare(0, error.size(), error) == 0 && l.find(text) != std::string::npos) return true;
    return false;
  }
};
CaptureLogger g_logger;
struct Finder : ILoggerFinder {
  ILogger* findLogger() noexcept override { return &g_logger; }
} g_finder;

// ---- IExprBuilder with constant and symbolic dims --------------------------------------------
class HostExpr : public IDimensionExpr {
 public:
  HostExpr(bool constant, int64_t value) : impl_(constant, value) { mImpl = &impl_; }
  ~HostExpr() noexcept override = default;

 private:
  struct Impl : apiv::VDimensionExpr {
    Impl(bool c, int64_t v) : constant(c), value(v) {}
    bool isConstant() const override { return constant; }
    int64_t getConstantValue() const override { return constant ? value : -1; }
    bool isSizeTensor() const override { return false; }
    bool constant;
    int64_t value;
  } impl_;
};

class HostExprBuilder : public IExprBuilder {
 public:
  HostExprBuilder() : impl_(this) { mImpl = &impl_; }
  ~HostExprBuilder() noexcept override = default;
  const IDimensionExpr* symbol() { return &exprs_.emplace_back(false, -1); }
  const IDimensionExpr* make(int64_t v) { return &exprs_.emplace_back(true, v); }

 private:
  struct Impl : apiv::VExprBuilder {
    explicit Impl(HostExprBuilder* b) : owner(b) {}
    const IDimensionExpr* constant(int64_t v) override { return owner->make(v); }
    const IDimensionExpr* operation(DimensionOperation op, const IDimensionExpr& a, const IDimensionExpr& b) override {
      if (!a.isConstant() || !b.isConstant()) return owner->symbol();
      const int64_t x = a.getConstantValue(), y = b.getConstantValue();
      switch (op) {
        case DimensionOperation::kSUM: return owner->make(x + y);
        case DimensionOperation::kPROD: return owner->make(x * y);
        case DimensionOperation::kMAX: return owner->make(x > y ? x : y);
        case DimensionOperation::kMIN: return owner->make(x < y ? x : y);
        case DimensionOperation::kSUB: return owner->make(x - y);
        case DimensionOperation::kEQUAL: return owner->make(x == y);
        case DimensionOperation::kLESS: return owner->make(x < y);
        case DimensionOperation::kFLOOR_DIV: return owner->make(y ? x / y : 0);
        case DimensionOperation::kCEIL_DIV: return owner->make(y ? (x + y - 1) / y : 0);
      }
      return nullptr;
    }
    const IDimensionExpr* declareSizeTensor(int32_t, const IDimensionExpr&, const IDimensionExpr&) override {
      return nullptr;
    }
    HostExprBuilder* owner;
  } impl_;
  std::deque<HostExpr> exprs_;  // stable addresses
};

struct NoResources : IPluginResourceContext {
  IGpuAllocator* getGpuAllocator() const noexcept override { return nullptr; }
  IErrorRecorder* getErrorRecorder() const noexcept override { return nullptr; }
};

// ---- helpers ---------------------------------------------------------------------------------
using GetCreators = IPluginCreatorInterface* const* (*)(int32_t&);
using SetLoggerFinder = void (*)(ILoggerFinder*);
std::map<std::string, IPluginCreatorV3One*> g_creators;

struct Deleter {
  void operator()(IPluginV3* p) const { delete p; }
};
using PluginPtr = std::unique_ptr<IPluginV3, Deleter>;

IPluginV3* create(const char* op, std::vector<PluginField> fields, TensorRTPhase phase = TensorRTPhase::kBUILD) {
  PluginFieldCollection fc{static_cast<int32_t>(fields.size()), fields.data()};
  return g_creators.at(op)->createPlugin("node0", &fc, phase);
}
PluginField float_field(const char* name, const float* v) { return PluginField(name, v, PluginFieldType::kFLOAT32, 1); }
IPluginV3OneCore* core(IPluginV3* p) { return static_cast<IPluginV3OneCore*>(p->getCapabilityInterface(PluginCapabilityType::kCORE)); }
IPluginV3OneBuild* build(IPluginV3* p) { return static_cast<IPluginV3OneBuild*>(p->getCapabilityInterface(PluginCapabilityType::kBUILD)); }
IPluginV3OneRuntime* runtime(IPluginV3* p) { return static_cast<IPluginV3OneRuntime*>(p->getCapabilityInterface(PluginCapabilityType::kRUNTIME)); }

// name -> (type, value as double); values copied out of the plugin's own storage
std::map<std::string, std::pair<PluginFieldType, double>> serialized(IPluginV3* p) {
  std::map<std::string, std::pair<PluginFieldType, double>> out;
  const PluginFieldCollection* fc = runtime(p)->getFieldsToSerialize();
  for (int32_t i = 0; i < fc->nbFields; ++i) {
    const PluginField& f = fc->fields[i];
    double v = 0;
    if (f.type == PluginFieldType::kFLOAT32) v = *static_cast<const float*>(f.data);
    if (f.type == PluginFieldType::kINT32) v = *static_cast<const int32_t*>(f.data);
    out[f.name] = {f.type, v};
  }
  return out;
}

Dims dims(std::initializer_list<int64_t> d) {
  Dims r{};
  r.nbDims = static_cast<int32_t>(d.size());
  int i = 0;
  for (int64_t v : d) r.d[i++] = v;
  return r;
}
DynamicPluginTensorDesc dyn(Dims d, DataType t = DataType::kFLOAT, TensorFormat f = TensorFormat::kLINEAR) {
  DynamicPluginTensorDesc r{};
  r.desc.dims = d;
  r.desc.type = t;
  r.desc.format = f;
  r.min = r.max = r.opt = d;
  return r;
}
PluginTensorDesc desc(Dims d, DataType t = DataType::kFLOAT) { return dyn(d, t).desc; }

const char* const kWrongW = "opforge.RMSNorm: W: expected 1-D tensor of length 64 (last dim of X), got shape [32]";

// ---- the checks ------------------------------------------------------------------------------
void check_creators() {
  struct Want { const char* name; const char* field; float value; };
  for (Want w : {Want{"Swish", "beta", 1.0f}, Want{"RMSNorm", "epsilon", 1e-6f}, Want{"AddRMSNorm", "epsilon", 1e-6f}}) {
    IPluginCreatorV3One* c = g_creators.count(w.name) ? g_creators[w.name] : nullptr;
    expect(c != nullptr, std::string("creator ") + w.name + " registered");
    if (!c) continue;
    expect(std::strcmp(c->getInterfaceInfo().kind, "PLUGIN CREATOR_V3ONE") == 0, "interface kind PLUGIN CREATOR_V3ONE");
    expect(std::strcmp(c->getPluginVersion(), "1") == 0, std::string(w.name) + " version 1");
    expect(std::strcmp(c->getPluginNamespace(), "opforge") == 0, std::string(w.name) + " namespace opforge");
    const PluginFieldCollection* fc = c->getFieldNames();
    expect(fc && fc->nbFields == 1 && std::strcmp(fc->fields[0].name, w.field) == 0 &&
               fc->fields[0].type == PluginFieldType::kFLOAT32 && fc->fields[0].length == 1,
           std::string(w.name) + " declares field " + w.field + " float32[1]");
    expect(fc && fc->fields[0].data && *static_cast<const float*>(fc->fields[0].data) == w.value,
           std::string(w.name) + " default " + std::to_string(w.value));
  }
}

void check_roundtrip() {
  struct Case { const char* op; const char* field; float value; };
  for (Case k : {Case{"Swish", "beta", 0.5f}, Case{"RMSNorm", "epsilon", 1e-5f}, Case{"AddRMSNorm", "epsilon", 1e-5f}}) {
    PluginPtr first(create(k.op, {float_field(k.field, &k.value)}));
    expect(first != nullptr, std::string(k.op) + " created from fields");
    if (!first) continue;
    expect(std::strcmp(core(first.get())->getPluginName(), k.op) == 0 &&
               std::strcmp(core(first.get())->getPluginNamespace(), "opforge") == 0,
           std::string(k.op) + " plugin names itself");
    expect(core(first.get()) && build(first.get()) && runtime(first.get()), "all three capabilities");
    auto before = serialized(first.get());
    expect(before.size() == 2 && before[k.field] == std::make_pair(PluginFieldType::kFLOAT32, double(k.value)) &&
               before["format_version"] == std::make_pair(PluginFieldType::kINT32, 1.0),
           std::string(k.op) + " serializes " + k.field + " and format_version 1");
    // Recreate as TensorRT does at deserialization: the runtime phase, from the serialized fields.
    const PluginFieldCollection* fc = runtime(first.get())->getFieldsToSerialize();
    PluginPtr second(g_creators[k.op]->createPlugin("node0", fc, TensorRTPhase::kRUNTIME));
    first.reset();  // nothing of the first object may be needed any more
    expect(second != nullptr && serialized(second.get()) == before, std::string(k.op) + " round trip equal");
  }
  PluginPtr swish(create("Swish", {}));
  expect(swish && serialized(swish.get())["beta"].second == 1.0, "Swish without fields: beta = 1");
  PluginPtr rms(g_creators["RMSNorm"]->createPlugin("n", nullptr, TensorRTPhase::kBUILD));
  expect(rms && std::fabs(serialized(rms.get())["epsilon"].second - 1e-6) < 1e-12, "RMSNorm with null fields: epsilon = 1e-6");
}

void check_bad_fields() {
  const float nan = std::nanf(""), negative = -1.0f, inf = INFINITY, one = 1.0f;
  const int32_t two = 2, newer = 2, v1 = 1;
  expect(create("Swish", {float_field("beta", &nan)}) == nullptr &&
             g_logger.said("opforge.Swish: beta: expected a finite float32, got nan"), "beta NaN refused");
  expect(create("RMSNorm", {float_field("epsilon", &negative)}) == nullptr &&
             g_logger.said("opforge.RMSNorm: epsilon: expected a finite float32 >= 0, got -1"), "epsilon < 0 refused");
  expect(create("RMSNorm", {float_field("epsilon", &inf)}) == nullptr &&
             g_logger.said("opforge.RMSNorm: epsilon: expected a finite float32 >= 0, got inf"), "epsilon inf refused");
  expect(create("Swish", {PluginField("beta", &two, PluginFieldType::kINT32, 1)}) == nullptr &&
             g_logger.said("opforge.Swish: beta: expected one float32 value, got 1 int32 value(s)"), "beta as int32 refused");
  expect(create("Swish", {float_field("beta", &one), PluginField("format_version", &newer, PluginFieldType::kINT32, 1)},
                TensorRTPhase::kRUNTIME) == nullptr &&
             g_logger.said("opforge.Swish: format_version: expected a serialization format from 1 to 1"),
         "a newer serialization format refused");
  PluginPtr ok(create("Swish", {float_field("beta", &one), PluginField("format_version", &v1, PluginFieldType::kINT32, 1),
                                PluginField("plugin_hint", &v1, PluginFieldType::kINT32, 1)}));
  expect(ok != nullptr && g_logger.said("opforge.Swish: ignoring unknown plugin field 'plugin_hint'"),
         "unknown field ignored with a warning at build time");
}

// ---- field collections from outside: both phases ------------------------------------------
const TensorRTPhase kBothPhases[] = {TensorRTPhase::kBUILD, TensorRTPhase::kRUNTIME};
const char* phase_name(TensorRTPhase phase) { return phase == TensorRTPhase::kBUILD ? "build" : "runtime"; }

// createPlugin must return nullptr and log `message` (a substring of one error line).
void expect_refused(const char* op, const PluginFieldCollection* fc, TensorRTPhase phase, const std::string& message,
                    const std::string& what) {
  g_logger.lines.clear();
  PluginPtr plugin(g_creators.at(op)->createPlugin("node0", fc, phase));
  expect(plugin == nullptr && g_logger.said_error(message),
         what + " (" + phase_name(phase) + " phase) refused: " + message);
}
void expect_refused(const char* op, std::vector<PluginField> fields, TensorRTPhase phase, const std::string& message,
                    const std::string& what) {
  PluginFieldCollection fc{static_cast<int32_t>(fields.size()), fields.data()};
  expect_refused(op, &fc, phase, message, what);
}

const int32_t kV1 = 1;
PluginField format_field(const int32_t* v = &kV1) { return PluginField("format_version", v, PluginFieldType::kINT32, 1); }

void check_serialized_state() {
  const float half = 0.5f, two = 2.0f;
  const auto R = TensorRTPhase::kRUNTIME;
  // An engine's state lacking the attribute or the format must not fall back to defaults.
  expect_refused("Swish", {format_field()}, R,
                 "opforge.Swish: beta: expected one serialized float32 field (the engine's plugin state is "
                 "incomplete: rebuild the engine), got none", "only format_version");
  expect_refused("RMSNorm", {format_field()}, R, "opforge.RMSNorm: epsilon: expected one serialized float32 field",
                 "RMSNorm only format_version");
  expect_refused("Swish", {float_field("beta", &half)}, R,
                 "opforge.Swish: format_version: expected one serialized int32 field", "only beta");
  expect_refused("Swish", std::vector<PluginField>{}, R, "opforge.Swish: format_version: expected one serialized int32 field", "no fields");
  expect_refused("Swish", nullptr, R,
                 "opforge.Swish: plugin fields: expected one beta (float32[1]) and one format_version (int32[1]), "
                 "got no field collection (NULL)", "a NULL collection");
  const PluginFieldCollection no_array{2, nullptr};
  for (TensorRTPhase phase : kBothPhases)
    expect_refused("Swish", &no_array, phase, "opforge.Swish: plugin fields: expected an array of 2 fields, got fields = NULL",
                   "nbFields=2 with fields=NULL");
  const int32_t two_v = 2;
  expect_refused("Swish", {float_field("beta", &half), format_field(), PluginField("gamma", &two_v, PluginFieldType::kINT32, 1)},
                 R, "opforge.Swish: plugin field 'gamma': expected one beta (float32[1]) and one format_version (int32[1]) "
                    "(serialized state), got an unknown field", "an unknown serialized field");
  const char odd[] = "\x01quote'\xff";
  expect_refused("Swish", {float_field("beta", &half), format_field(), PluginField(odd, &two_v, PluginFieldType::kINT32, 1)},
                 R, "opforge.Swish: plugin field '\\x01quote\\x27\\xff': expected", "an unknown field name, escaped");
  // A well-formed state, in any order, is accepted.
  PluginFieldCollection good_fc{};
  std::vector<PluginField> good = {format_field(), float_field("beta", &two)};
  good_fc = {2, good.data()};
  PluginPtr swapped(g_creators["Swish"]->createPlugin("node0", &good_fc, R));
  expect(swapped && serialized(swapped.get())["beta"].second == 2.0, "serialized fields in another order accepted");
}

void check_field_structure() {
  const float half = 0.5f, two = 2.0f;
  const double wide = 0.25;
  const char text[] = "1.0";
  for (TensorRTPhase phase : kBothPhases) {
    // Repeated fields: which one wins would be arbitrary.
    expect_refused("Swish", {float_field("beta", &half), format_field(), float_field("beta", &two)}, phase,
                   "opforge.Swish: beta: expected exactly one field named beta, got a repeated field (fields 0 and 2)",
                   "beta twice");
    expect_refused("RMSNorm", {format_field(), float_field("epsilon", &half), format_field()}, phase,
                   "opforge.RMSNorm: format_version: expected exactly one field named format_version, got a repeated "
                   "field (fields 0 and 2)", "format_version twice");
    const PluginFieldCollection negative{-1, nullptr};
    expect_refused("Swish", &negative, phase, "opforge.Swish: plugin fields: expected nbFields >= 0, got nbFields = -1",
                   "negative nbFields");
    PluginField fields_with_negative[1] = {float_field("beta", &half)};
    const PluginFieldCollection negative_with_array{-5, fields_with_negative};
    expect_refused("Swish", &negative_with_array, phase, "expected nbFields >= 0, got nbFields = -5",
                   "negative nbFields with an array");
    expect_refused("Swish", {float_field("beta", &half), PluginField(nullptr, &kV1, PluginFieldType::kINT32, 1)}, phase,
                   "opforge.Swish: plugin field 1: expected a named field, got name = NULL", "a NULL field name");
    expect_refused("Swish", {PluginField("beta", nullptr, PluginFieldType::kFLOAT32, 1), format_field()}, phase,
                   "opforge.Swish: beta: expected one float32 value, got 1 float32 value(s) at data = NULL",
                   "beta with NULL data");
    expect_refused("Swish", {float_field("beta", &half), PluginField("format_version", nullptr, PluginFieldType::kINT32, 1)},
                   phase, "opforge.Swish: format_version: expected one int32 value, got 1 int32 value(s) at data = NULL",
                   "format_version with NULL data");
    expect_refused("Swish", {PluginField("beta", &half, PluginFieldType::kFLOAT32, 0), format_field()}, phase,
                   "opforge.Swish: beta: expected one float32 value, got 0 float32 value(s)", "beta of length 0");
    const float pair[2] = {0.5f, 0.5f};
    expect_refused("Swish", {PluginField("beta", pair, PluginFieldType::kFLOAT32, 2), format_field()}, phase,
                   "opforge.Swish: beta: expected one float32 value, got 2 float32 value(s)", "beta of length 2");
    expect_refused("Swish", {PluginField("beta", &half, PluginFieldType::kFLOAT32, -1), format_field()}, phase,
                   "opforge.Swish: beta: expected one float32 value, got -1 float32 value(s)", "beta of length -1");
    expect_refused("Swish", {PluginField("beta", text, PluginFieldType::kCHAR, 3), format_field()}, phase,
                   "opforge.Swish: beta: expected one float32 value, got 3 char value(s)", "beta as a string");
    expect_refused("RMSNorm", {float_field("epsilon", &half), PluginField("format_version", &half, PluginFieldType::kFLOAT32, 1)},
                   phase, "opforge.RMSNorm: format_version: expected one int32 value, got 1 float32 value(s)",
                   "format_version as float32");
    const int64_t v1_64 = 1;
    expect_refused("RMSNorm", {float_field("epsilon", &half), PluginField("format_version", &v1_64, PluginFieldType::kINT64, 1)},
                   phase, "expected one int32 value, got 1 int64 value(s)", "format_version as int64");
    expect_refused("Swish", {PluginField("beta", &half, static_cast<PluginFieldType>(99), 1), format_field()}, phase,
                   "opforge.Swish: beta: expected one float32 value, got 1 type 99 value(s)", "beta of an unknown type");
    for (int32_t version : {0, -1, 2, 2147483647}) {
      expect_refused("Swish", {float_field("beta", &half), format_field(&version)}, phase,
                     "opforge.Swish: format_version: expected a serialization format from 1 to 1 (the engine was "
                     "built by a newer opforge-trt: install it, or rebuild the engine), got " + std::to_string(version),
                     "format_version " + std::to_string(version));
    }
    // float64 fields are read as the double they are.
    PluginPtr f64(create("Swish", {PluginField("beta", &wide, PluginFieldType::kFLOAT64, 1), format_field()}, phase));
    expect(f64 && serialized(f64.get())["beta"] == std::make_pair(PluginFieldType::kFLOAT32, 0.25),
           std::string("beta as float64 0.25 accepted, serialized as float32 (") + phase_name(phase) + ")");
  }
}

// The shared float32 rule (kernels/include/opforge/kernels/attrs.h): finite once rounded to float32.
void check_float32_rule() {
  struct Case { const char* op; const char* field; double value; const char* message; };
  const Case cases[] = {
      {"RMSNorm", "epsilon", 1e300, "opforge.RMSNorm: epsilon: expected a finite float32 >= 0, got 1e+300"},
      {"Swish", "beta", 1e39, "opforge.Swish: beta: expected a finite float32, got 1e+39"},
      {"Swish", "beta", -1e39, "opforge.Swish: beta: expected a finite float32, got -1e+39"},
      {"Swish", "beta", -INFINITY, "opforge.Swish: beta: expected a finite float32, got -inf"},
      {"Swish", "beta", 3.4028235677973366e38, "opforge.Swish: beta: expected a finite float32, got 3.40282357e+38"},
      {"RMSNorm", "epsilon", -1e-30, "opforge.RMSNorm: epsilon: expected a finite float32 >= 0, got -1e-30"},
  };
  for (TensorRTPhase phase : kBothPhases) {
    for (const Case& c : cases) {
      expect_refused(c.op, {PluginField(c.field, &c.value, PluginFieldType::kFLOAT64, 1), format_field()}, phase,
                     c.message, std::string(c.field) + " float64 " + c.message);
    }
    const float minus_inf = -INFINITY;
    expect_refused("Swish", {float_field("beta", &minus_inf), format_field()}, phase,
                   "opforge.Swish: beta: expected a finite float32, got -inf", "beta float32 -inf");
    const double largest_below = 3.4028235677973362e38;  // rounds to FLT_MAX: finite in float32
    PluginPtr edge(create("Swish", {PluginField("beta", &largest_below, PluginFieldType::kFLOAT64, 1), format_field()}, phase));
    expect(edge && serialized(edge.get())["beta"].second == double(FLT_MAX),
           std::string("beta just below the float32 overflow accepted as FLT_MAX (") + phase_name(phase) + ")");
  }
}

// `create OP PHASE NAME=TYPE:VALUE...` (TYPE f32, f64, i32): one createPlugin for the Python tests,
// which compare its words with opforge_spec. Prints "created <attr>" or "refused"; logs as they come.
int create_command(int argc, char** argv) {
  const std::string op = argv[0];
  const TensorRTPhase phase = std::string(argv[1]) == "runtime" ? TensorRTPhase::kRUNTIME : TensorRTPhase::kBUILD;
  std::deque<std::string> names;
  std::deque<double> f64;
  std::deque<float> f32;
  std::deque<int32_t> i32;
  std::vector<PluginField> fields;
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    const size_t eq = arg.find('='), colon = arg.find(':', eq);
    if (eq == std::string::npos || colon == std::string::npos) return std::printf("FAIL bad field %s\n", argv[i]), 2;
    const char* name = names.emplace_back(arg.substr(0, eq)).c_str();
    const std::string type = arg.substr(eq + 1, colon - eq - 1), value = arg.substr(colon + 1);
    if (type == "f64") fields.emplace_back(name, &f64.emplace_back(std::strtod(value.c_str(), nullptr)), PluginFieldType::kFLOAT64, 1);
    else if (type == "f32") fields.emplace_back(name, &f32.emplace_back(std::strtof(value.c_str(), nullptr)), PluginFieldType::kFLOAT32, 1);
    else if (type == "i32") fields.emplace_back(name, &i32.emplace_back(std::stoi(value)), PluginFieldType::kINT32, 1);
    else return std::printf("FAIL bad field type %s\n", type.c_str()), 2;
  }
  PluginFieldCollection fc{static_cast<int32_t>(fields.size()), fields.data()};
  PluginPtr plugin(g_creators.at(op)->createPlugin("node0", &fc, phase));
  if (!plugin) return std::printf("refused\n"), 0;
  for (const auto& [name, value] : serialized(plugin.get())) std::printf("created %s=%.9g\n", name.c_str(), value.second);
  return 0;
}

void check_formats() {
  PluginPtr swish(create("Swish", {}));
  PluginPtr rms(create("RMSNorm", {}));
  auto sfc = [](IPluginV3* p, int32_t pos, std::vector<DynamicPluginTensorDesc> io, int32_t nin) {
    return build(p)->supportsFormatCombination(pos, io.data(), nin, static_cast<int32_t>(io.size()) - nin);
  };
  const Dims x = dims({2, 8}), w = dims({8});
  for (DataType t : {DataType::kFLOAT, DataType::kHALF, DataType::kBF16}) {
    expect(sfc(swish.get(), 0, {dyn(x, t), dyn(x, t)}, 1) && sfc(swish.get(), 1, {dyn(x, t), dyn(x, t)}, 1),
           "Swish LINEAR type " + std::to_string(int(t)) + " accepted");
    expect(sfc(rms.get(), 1, {dyn(x, t), dyn(w, t), dyn(x, t)}, 2) && sfc(rms.get(), 2, {dyn(x, t), dyn(w, t), dyn(x, t)}, 2),
           "RMSNorm W and Y of X's type " + std::to_string(int(t)) + " accepted");
  }
  expect(!sfc(swish.get(), 0, {dyn(x, DataType::kINT32), dyn(x)}, 1), "int32 refused");
  expect(!sfc(swish.get(), 0, {dyn(x, DataType::kINT8), dyn(x)}, 1), "int8 refused");
  expect(!sfc(swish.get(), 0, {dyn(x, DataType::kFLOAT, TensorFormat::kCHW32), dyn(x)}, 1), "non-LINEAR refused");
  expect(!sfc(swish.get(), 1, {dyn(x, DataType::kFLOAT), dyn(x, DataType::kHALF)}, 1), "Y of another type refused");
  expect(!sfc(rms.get(), 1, {dyn(x, DataType::kFLOAT), dyn(w, DataType::kHALF), dyn(x)}, 2), "W of another type refused");
  for (DataType t : {DataType::kHALF, DataType::kBF16}) {
    const std::vector<DynamicPluginTensorDesc> mixed = {dyn(x, t), dyn(w, DataType::kFLOAT), dyn(x, t)};
    expect(sfc(rms.get(), 1, mixed, 2) && sfc(rms.get(), 2, mixed, 2),
           "RMSNorm W float32 with a 16-bit X (type " + std::to_string(int(t)) + ") and Y of X's type accepted");
    expect(!sfc(rms.get(), 2, {dyn(x, t), dyn(w, DataType::kFLOAT), dyn(x, DataType::kFLOAT)}, 2),
           "a mixed call's Y keeps X's type: float32 Y refused");
  }
  expect(!sfc(rms.get(), 1, {dyn(x, DataType::kHALF), dyn(w, DataType::kBF16), dyn(x, DataType::kHALF)}, 2),
         "bfloat16 W with a float16 X refused");
  expect(!sfc(rms.get(), 3, {dyn(x), dyn(w), dyn(x)}, 2) && !sfc(rms.get(), -1, {dyn(x), dyn(w), dyn(x)}, 2),
         "positions out of range refused");
  DataType out = DataType::kINT8;
  const DataType half[2] = {DataType::kHALF, DataType::kHALF};
  expect(build(rms.get())->getOutputDataTypes(&out, 1, half, 2) == 0 && out == DataType::kHALF, "output type = input type");
  const DataType mixed[2] = {DataType::kFLOAT, DataType::kHALF};
  expect(build(rms.get())->getOutputDataTypes(&out, 1, mixed, 2) != 0 &&
             g_logger.said("opforge.RMSNorm: W: expected dtype float32 (dtype of X), got float16"),
         "W of another type: getOutputDataTypes fails with the message");
  const DataType bf16_w32[2] = {DataType::kBF16, DataType::kFLOAT};
  expect(build(rms.get())->getOutputDataTypes(&out, 1, bf16_w32, 2) == 0 && out == DataType::kBF16,
         "float32 W with a bfloat16 X: Y is bfloat16");
  const DataType bf16_w16[2] = {DataType::kBF16, DataType::kHALF};
  expect(build(rms.get())->getOutputDataTypes(&out, 1, bf16_w16, 2) != 0 &&
             g_logger.said("opforge.RMSNorm: W: expected dtype bfloat16 (dtype of X) or float32, got float16"),
         "float16 W with a bfloat16 X: getOutputDataTypes names both allowed types");
  const DataType ints[1] = {DataType::kINT32};
  expect(build(swish.get())->getOutputDataTypes(&out, 1, ints, 1) != 0 &&
             g_logger.said("opforge.Swish: X: expected float32, float16 or bfloat16 tensor, got int32 tensor"),
         "int32 X: getOutputDataTypes fails with the message");
  expect(build(swish.get())->getNbOutputs() == 1, "one output");
}

void check_shapes() {
  HostExprBuilder b;
  PluginPtr rms(create("RMSNorm", {}));
  PluginPtr swish(create("Swish", {}));
  DimsExprs in[2]{};
  in[0].nbDims = 3;
  in[0].d[0] = b.symbol();  // dynamic batch
  in[0].d[1] = b.constant(3);
  in[0].d[2] = b.operation(DimensionOperation::kPROD, *b.constant(8), *b.constant(8));  // 64
  in[1].nbDims = 1;
  in[1].d[0] = b.constant(64);
  DimsExprs out[1]{};
  int32_t rc = build(rms.get())->getOutputShapes(in, 2, nullptr, 0, out, 1, b);
  bool same = rc == 0 && out[0].nbDims == 3;
  for (int i = 0; same && i < 3; ++i) same = out[0].d[i] == in[0].d[i];
  expect(same, "RMSNorm output dims are X's dims (symbolic batch kept)");
  DimsExprs again[1]{};
  build(rms.get())->getOutputShapes(in, 2, nullptr, 0, again, 1, b);
  expect(again[0].nbDims == out[0].nbDims && again[0].d[2] == out[0].d[2], "shape inference is a pure function");
  expect(build(swish.get())->getOutputShapes(in, 1, nullptr, 0, out, 1, b) == 0 && out[0].d[1]->getConstantValue() == 3,
         "Swish output dims are X's dims");
  in[1].d[0] = b.constant(32);
  expect(build(rms.get())->getOutputShapes(in, 2, nullptr, 0, out, 1, b) != 0 && g_logger.said(kWrongW),
         "RMSNorm W of the wrong length refused at shape inference");
  in[1].d[0] = b.symbol();
  expect(build(rms.get())->getOutputShapes(in, 2, nullptr, 0, out, 1, b) == 0, "unknown W length accepted until known");
  expect(build(rms.get())->getOutputShapes(in, 1, nullptr, 0, out, 1, b) != 0 &&
             g_logger.said("opforge.RMSNorm: inputs: expected 2 (X, W), got 1"), "RMSNorm with one input refused");
  DimsExprs scalar[2]{};
  scalar[1].nbDims = 1;
  scalar[1].d[0] = b.constant(1);
  expect(build(rms.get())->getOutputShapes(scalar, 2, nullptr, 0, out, 1, b) != 0 &&
             g_logger.said("opforge.RMSNorm: X: expected a tensor of rank >= 1, got a rank-0 tensor (scalar)"),
         "RMSNorm scalar X refused");
}

// SwiGLU: Y's last dim is half of X's, symbolic or constant; an odd or missing last dim is refused.
void check_swiglu() {
  HostExprBuilder b;
  PluginPtr swiglu(create("SwiGLU", {}));
  expect(swiglu != nullptr && serialized(swiglu.get())["beta"].second == 1.0, "SwiGLU without fields: beta = 1");
  DimsExprs in[1]{};
  in[0].nbDims = 3;
  in[0].d[0] = b.symbol();
  in[0].d[1] = b.constant(3);
  in[0].d[2] = b.constant(2 * 11);
  DimsExprs out[1]{};
  expect(build(swiglu.get())->getOutputShapes(in, 1, nullptr, 0, out, 1, b) == 0 && out[0].nbDims == 3 &&
             out[0].d[0] == in[0].d[0] && out[0].d[1]->getConstantValue() == 3 && out[0].d[2]->getConstantValue() == 11,
         "SwiGLU output dims: [batch, 3, 22] -> [batch, 3, 11]");
  in[0].d[2] = b.symbol();
  expect(build(swiglu.get())->getOutputShapes(in, 1, nullptr, 0, out, 1, b) == 0 && !out[0].d[2]->isConstant(),
         "SwiGLU symbolic last dim gives a symbolic half");
  in[0].d[2] = b.constant(7);
  expect(build(swiglu.get())->getOutputShapes(in, 1, nullptr, 0, out, 1, b) != 0 &&
             g_logger.said("opforge.SwiGLU: X: expected a tensor of rank >= 1 whose last dim is even and >= 2, "
                           "got shape [-1, 3, 7]"),
         "SwiGLU odd last dim refused at shape inference");
  DimsExprs scalar[1]{};
  expect(build(swiglu.get())->getOutputShapes(scalar, 1, nullptr, 0, out, 1, b) != 0 &&
             g_logger.said("opforge.SwiGLU: X: expected a tensor of rank >= 1 whose last dim is even and >= 2, got rank 0"),
         "SwiGLU scalar X refused");
  DynamicPluginTensorDesc odd[1] = {dyn(dims({4, 9}))}, half[1] = {dyn(dims({4, 4}))};
  expect(build(swiglu.get())->configurePlugin(odd, 1, half, 1) != 0 &&
             g_logger.said("opforge.SwiGLU: X: expected a tensor of rank >= 1 whose last dim is even and >= 2, got shape [4, 9]"),
         "SwiGLU odd last dim refused at configure");
  DynamicPluginTensorDesc good[1] = {dyn(dims({4, 8}))};
  expect(build(swiglu.get())->configurePlugin(good, 1, half, 1) == 0, "SwiGLU [4, 8] -> [4, 4] configures");
  const PluginTensorDesc zero_rank[1] = {desc(dims({}))}, y[1] = {desc(dims({}))};
  expect(runtime(swiglu.get())->onShapeChange(zero_rank, 1, y, 1) != 0, "SwiGLU rank 0 refused at onShapeChange");
}

// AddRMSNorm: three inputs (X, R of X's shape, W) and two outputs (Y, H = X + R, both X's dims and
// type), through every build and runtime call that sees the inputs and outputs.
const char* const kWrongR = "opforge.AddRMSNorm: R: expected a tensor of shape [4, 64] (the shape of X), got shape [4, 32]";

DimsExprs const_exprs(HostExprBuilder& b, std::initializer_list<int64_t> d) {
  DimsExprs e{};
  for (int64_t v : d) e.d[e.nbDims++] = b.constant(v);
  return e;
}

void check_residual_types(IPluginV3* add) {
  expect(build(add)->getNbOutputs() == 2, "AddRMSNorm has two outputs (Y, H)");
  DataType out[2] = {DataType::kINT8, DataType::kINT8};
  const DataType bf16[3] = {DataType::kBF16, DataType::kBF16, DataType::kBF16};
  expect(build(add)->getOutputDataTypes(out, 2, bf16, 3) == 0 && out[0] == DataType::kBF16 && out[1] == DataType::kBF16,
         "AddRMSNorm Y and H take X's type");
  const DataType mixed_r[3] = {DataType::kFLOAT, DataType::kHALF, DataType::kFLOAT};
  expect(build(add)->getOutputDataTypes(out, 2, mixed_r, 3) != 0 &&
             g_logger.said_error("opforge.AddRMSNorm: R: expected float32 tensor (same dtype as X), got float16 tensor"),
         "R of another type: getOutputDataTypes names R");
  const DataType mixed_w[3] = {DataType::kHALF, DataType::kHALF, DataType::kFLOAT};
  expect(build(add)->getOutputDataTypes(out, 2, mixed_w, 3) == 0 && out[0] == DataType::kHALF && out[1] == DataType::kHALF,
         "float32 W with a float16 X: Y and H take X's type");
  const DataType float32_r[3] = {DataType::kHALF, DataType::kFLOAT, DataType::kFLOAT};
  expect(build(add)->getOutputDataTypes(out, 2, float32_r, 3) != 0 &&
             g_logger.said_error("opforge.AddRMSNorm: R: expected float16 tensor (same dtype as X), got float32 tensor"),
         "R stays X's type with a float32 W");
  const DataType wrong_w[3] = {DataType::kFLOAT, DataType::kFLOAT, DataType::kHALF};
  expect(build(add)->getOutputDataTypes(out, 2, wrong_w, 3) != 0 &&
             g_logger.said_error("opforge.AddRMSNorm: W: expected dtype float32 (dtype of X), got float16"),
         "W of another type: getOutputDataTypes names W (the last input)");
  expect(build(add)->getOutputDataTypes(out, 1, bf16, 3) != 0 &&
             g_logger.said_error("opforge.AddRMSNorm: outputs: expected 2 (Y, H), got 1"), "one output refused");
}

void check_residual_formats(IPluginV3* add) {
  auto sfc = [&](int32_t pos, std::vector<DynamicPluginTensorDesc> io, int32_t nin = 3) {
    return build(add)->supportsFormatCombination(pos, io.data(), nin, static_cast<int32_t>(io.size()) - nin);
  };
  const Dims x = dims({2, 8}), w = dims({8});
  for (DataType t : {DataType::kFLOAT, DataType::kHALF, DataType::kBF16}) {
    bool all = true;
    for (int32_t pos = 0; pos < 5; ++pos) all = all && sfc(pos, {dyn(x, t), dyn(x, t), dyn(w, t), dyn(x, t), dyn(x, t)});
    expect(all, "AddRMSNorm X, R, W, Y, H of one type " + std::to_string(int(t)) + " accepted at all 5 positions");
  }
  const DataType F = DataType::kFLOAT, H = DataType::kHALF;
  expect(!sfc(1, {dyn(x, F), dyn(x, H), dyn(w, F), dyn(x, F), dyn(x, F)}), "R of another type refused");
  for (DataType t : {DataType::kHALF, DataType::kBF16}) {
    bool all = true;
    for (int32_t pos = 0; pos < 5; ++pos) all = all && sfc(pos, {dyn(x, t), dyn(x, t), dyn(w, F), dyn(x, t), dyn(x, t)});
    expect(all, "AddRMSNorm float32 W with X, R, Y, H of type " + std::to_string(int(t)) + " accepted at all 5 positions");
    expect(!sfc(1, {dyn(x, t), dyn(x, F), dyn(w, F), dyn(x, t), dyn(x, t)}), "float32 R with a 16-bit X refused");
  }
  expect(!sfc(4, {dyn(x, F), dyn(x, F), dyn(w, F), dyn(x, F), dyn(x, H)}), "H of another type refused");
  expect(!sfc(4, {dyn(x), dyn(x), dyn(w), dyn(x), dyn(x, F, TensorFormat::kCHW32)}), "non-LINEAR H refused");
  expect(!sfc(5, {dyn(x), dyn(x), dyn(w), dyn(x), dyn(x)}) && !sfc(-1, {dyn(x), dyn(x), dyn(w), dyn(x), dyn(x)}),
         "positions out of range refused");
  expect(!sfc(0, {dyn(x), dyn(x), dyn(w), dyn(x)}), "only one output: refused");
  expect(!sfc(0, {dyn(x), dyn(w), dyn(x), dyn(x)}, 2), "only two inputs: refused");
}

void check_residual_shapes(IPluginV3* add) {
  HostExprBuilder b;
  DimsExprs in[3]{};
  in[0].nbDims = in[1].nbDims = 3;
  in[0].d[0] = b.symbol();  // dynamic batch
  in[1].d[0] = b.symbol();
  in[0].d[1] = in[1].d[1] = b.constant(3);
  in[0].d[2] = in[1].d[2] = b.constant(64);
  in[2] = const_exprs(b, {64});
  DimsExprs out[2]{};
  bool same = build(add)->getOutputShapes(in, 3, nullptr, 0, out, 2, b) == 0 && out[0].nbDims == 3 && out[1].nbDims == 3;
  for (int i = 0; same && i < 3; ++i) same = out[0].d[i] == in[0].d[i] && out[1].d[i] == in[0].d[i];
  expect(same, "AddRMSNorm Y and H dims are X's dims (symbolic batch kept)");
  DimsExprs x_r_w[3] = {const_exprs(b, {4, 64}), const_exprs(b, {4, 32}), const_exprs(b, {64})};
  g_logger.lines.clear();
  expect(build(add)->getOutputShapes(x_r_w, 3, nullptr, 0, out, 2, b) != 0 && g_logger.said_error(kWrongR),
         "R of another shape refused at shape inference: " + std::string(kWrongR));
  x_r_w[1] = const_exprs(b, {64});
  expect(build(add)->getOutputShapes(x_r_w, 3, nullptr, 0, out, 2, b) != 0 &&
             g_logger.said_error("opforge.AddRMSNorm: R: expected a tensor of shape [4, 64] (the shape of X), got shape [64]"),
         "R of another rank refused");
  x_r_w[1] = const_exprs(b, {4, 64});
  x_r_w[1].d[0] = b.symbol();
  expect(build(add)->getOutputShapes(x_r_w, 3, nullptr, 0, out, 2, b) == 0, "R extents unknown at build time accepted");
  x_r_w[2] = const_exprs(b, {32});
  expect(build(add)->getOutputShapes(x_r_w, 3, nullptr, 0, out, 2, b) != 0 &&
             g_logger.said_error("opforge.AddRMSNorm: W: expected 1-D tensor of length 64 (last dim of X), got shape [32]"),
         "W (the third input) of the wrong length refused");
  expect(build(add)->getOutputShapes(x_r_w, 2, nullptr, 0, out, 2, b) != 0 &&
             g_logger.said_error("opforge.AddRMSNorm: inputs: expected 3 (X, R, W), got 2"), "two inputs refused");
}

void check_residual_runtime(IPluginV3* add) {
  auto configure = [&](Dims x, Dims r) {
    DynamicPluginTensorDesc in[3] = {dyn(x), dyn(r), dyn(dims({64}))}, out[2] = {dyn(x), dyn(x)};
    return build(add)->configurePlugin(in, 3, out, 2);
  };
  PluginTensorDesc io[3] = {desc(dims({4, 64})), desc(dims({4, 32})), desc(dims({64}))}, out[2] = {io[0], io[0]};
  g_logger.lines.clear();
  expect(configure(dims({4, 64}), dims({4, 32})) != 0 && g_logger.said_error(kWrongR), "configurePlugin refuses R [4, 32]");
  expect(configure(dims({-1, 64}), dims({-1, 64})) == 0 && configure(dims({4, 64}), dims({4, 64})) == 0,
         "configurePlugin accepts R of X's dims, unknown ones too");
  g_logger.lines.clear();
  expect(runtime(add)->onShapeChange(io, 3, out, 2) != 0 && g_logger.said_error(kWrongR), "onShapeChange refuses R [4, 32]");
  const void* inputs[3] = {nullptr, nullptr, nullptr};
  void* outputs[2] = {nullptr, nullptr};
  g_logger.lines.clear();
  expect(runtime(add)->enqueue(io, out, inputs, outputs, nullptr, nullptr) != 0 && g_logger.said_error(kWrongR),
         "enqueue refuses R [4, 32] before any launch");
  PluginTensorDesc empty[3] = {desc(dims({0, 64})), desc(dims({0, 64})), desc(dims({64}))};
  expect(runtime(add)->onShapeChange(empty, 3, empty, 2) == 0 &&
             runtime(add)->enqueue(empty, empty, inputs, outputs, nullptr, nullptr) == 0,
         "empty X and R: nothing to launch, success");
}

void check_residual() {
  PluginPtr add(create("AddRMSNorm", {}));
  expect(add != nullptr, "AddRMSNorm created without fields");
  if (!add) return;
  check_residual_types(add.get());
  check_residual_formats(add.get());
  check_residual_shapes(add.get());
  check_residual_runtime(add.get());
}

// RMSNormQuant: outputs of their own type (Q: int8, or fp8 as quant_dtype picks; Scale: float32
// whatever X's type) and shape (Scale: X's dims with the last one 1), an enum attribute as an
// int32 field through creation, serialization and the build calls.
PluginField int_field(const char* name, const int32_t* v) { return PluginField(name, v, PluginFieldType::kINT32, 1); }

void check_quant_fields() {
  IPluginCreatorV3One* c = g_creators.count("RMSNormQuant") ? g_creators["RMSNormQuant"] : nullptr;
  expect(c != nullptr, "creator RMSNormQuant registered");
  if (!c) return;
  const PluginFieldCollection* fc = c->getFieldNames();
  bool declared = fc && fc->nbFields == 3;
  for (int32_t i = 0; declared && i < 3; ++i) {
    const bool is_enum = std::strcmp(fc->fields[i].name, "quant_dtype") == 0;
    declared = fc->fields[i].type == (is_enum ? PluginFieldType::kINT32 : PluginFieldType::kFLOAT32) &&
               (!is_enum || *static_cast<const int32_t*>(fc->fields[i].data) == 3);
  }
  expect(declared, "RMSNormQuant declares epsilon, scale_ub float32[1] and quant_dtype int32[1] (default 3)");
  const int32_t fp8 = 17, bad = 5;
  PluginPtr first(create("RMSNormQuant", {int_field("quant_dtype", &fp8)}));
  auto before = first ? serialized(first.get()) : decltype(serialized(nullptr)){};
  expect(first && before["quant_dtype"] == std::make_pair(PluginFieldType::kINT32, 17.0),
         "quant_dtype 17 serialized as int32");
  PluginPtr second(first ? c->createPlugin("node0", runtime(first.get())->getFieldsToSerialize(), TensorRTPhase::kRUNTIME)
                         : nullptr);
  expect(second && serialized(second.get()) == before, "RMSNormQuant round trip equal");
  g_logger.lines.clear();
  expect(create("RMSNormQuant", {int_field("quant_dtype", &bad)}) == nullptr &&
             g_logger.said_error("opforge.RMSNormQuant: quant_dtype: expected one of 3 (int8), 17 (float8_e4m3fn), got 5"),
         "quant_dtype 5 refused with the spec's words");
  const float as_float = 17.0f;
  expect(create("RMSNormQuant", {float_field("quant_dtype", &as_float)}) == nullptr &&
             g_logger.said_error("opforge.RMSNormQuant: quant_dtype: expected one int32 value, got 1 float32 value(s)"),
         "quant_dtype as a float32 field refused");
}

void check_quant_types(IPluginV3* int8, IPluginV3* fp8) {
  DataType out[2] = {DataType::kFLOAT, DataType::kHALF};
  for (DataType t : {DataType::kFLOAT, DataType::kHALF, DataType::kBF16}) {
    const DataType in[2] = {t, t};
    expect(build(int8)->getOutputDataTypes(out, 2, in, 2) == 0 && out[0] == DataType::kINT8 && out[1] == DataType::kFLOAT,
           "quant_dtype 3: Q int8, Scale float32 for X type " + std::to_string(int(t)));
    expect(build(fp8)->getOutputDataTypes(out, 2, in, 2) == 0 && out[0] == DataType::kFP8 && out[1] == DataType::kFLOAT,
           "quant_dtype 17: Q fp8, Scale float32 for X type " + std::to_string(int(t)));
  }
  auto sfc = [](IPluginV3* p, int32_t pos, std::vector<DynamicPluginTensorDesc> io) {
    return build(p)->supportsFormatCombination(pos, io.data(), 2, static_cast<int32_t>(io.size()) - 2);
  };
  const Dims x = dims({2, 8}), w = dims({8}), s = dims({2, 1});
  const DataType H = DataType::kHALF, F = DataType::kFLOAT, I8 = DataType::kINT8, F8 = DataType::kFP8;
  bool all = true;
  for (int32_t pos = 0; pos < 4; ++pos) all = all && sfc(int8, pos, {dyn(x, H), dyn(w, H), dyn(x, I8), dyn(s, F)});
  expect(all, "int8: X, W half, Q int8, Scale float32 accepted at all 4 positions");
  expect(sfc(fp8, 2, {dyn(x, H), dyn(w, H), dyn(x, F8), dyn(s, F)}), "fp8: Q fp8 accepted");
  expect(!sfc(int8, 2, {dyn(x, H), dyn(w, H), dyn(x, F8), dyn(s, F)}), "int8: Q fp8 refused");
  expect(!sfc(fp8, 2, {dyn(x, H), dyn(w, H), dyn(x, I8), dyn(s, F)}), "fp8: Q int8 refused");
  expect(!sfc(int8, 2, {dyn(x, H), dyn(w, H), dyn(x, H), dyn(s, F)}), "Q of X's type refused");
  expect(!sfc(int8, 3, {dyn(x, H), dyn(w, H), dyn(x, I8), dyn(s, H)}), "Scale of X's type (half) refused");
  expect(!sfc(int8, 0, {dyn(x, I8), dyn(w, I8), dyn(x, I8), dyn(s, F)}), "int8 X refused");
}

void check_quant_shapes(IPluginV3* int8) {
  HostExprBuilder b;
  DimsExprs in[2]{};
  in[0].nbDims = 3;
  in[0].d[0] = b.symbol();  // dynamic batch
  in[0].d[1] = b.constant(3);
  in[0].d[2] = b.constant(64);
  in[1] = const_exprs(b, {64});
  DimsExprs out[2]{};
  const bool ok = build(int8)->getOutputShapes(in, 2, nullptr, 0, out, 2, b) == 0;
  expect(ok && out[0].nbDims == 3 && out[0].d[0] == in[0].d[0] && out[0].d[2] == in[0].d[2],
         "Q dims are X's (symbolic batch kept)");
  expect(ok && out[1].nbDims == 3 && out[1].d[0] == in[0].d[0] && out[1].d[1]->getConstantValue() == 3 &&
             out[1].d[2]->isConstant() && out[1].d[2]->getConstantValue() == 1,
         "Scale dims are X's with the last one 1: [batch, 3, 1]");
  in[1] = const_exprs(b, {32});
  g_logger.lines.clear();
  expect(build(int8)->getOutputShapes(in, 2, nullptr, 0, out, 2, b) != 0 &&
             g_logger.said_error("opforge.RMSNormQuant: W: expected 1-D tensor of length 64 (last dim of X), got shape [32]"),
         "W of the wrong length refused");
}

void check_quant_runtime(IPluginV3* int8) {
  const void* in[2] = {nullptr, nullptr};
  void* out[2] = {nullptr, nullptr};
  PluginTensorDesc empty[2] = {desc(dims({0, 8})), desc(dims({8}))}, empty_out[2] = {desc(dims({0, 8}), DataType::kINT8),
                                                                                     desc(dims({0, 1}))};
  expect(runtime(int8)->enqueue(empty, empty_out, in, out, nullptr, nullptr) == 0, "no rows: nothing to launch, success");
  PluginTensorDesc bad_w[2] = {desc(dims({4, 8})), desc(dims({4}))}, outs[2] = {desc(dims({4, 8}), DataType::kINT8),
                                                                               desc(dims({4, 1}))};
  g_logger.lines.clear();
  expect(runtime(int8)->enqueue(bad_w, outs, in, out, nullptr, nullptr) != 0 &&
             g_logger.said_error("opforge.RMSNormQuant: W: expected 1-D tensor of length 8 (last dim of X), got shape [4]"),
         "enqueue refuses a W of the wrong length before any launch");
}

void check_quant() {
  check_quant_fields();
  const int32_t fp8_code = 17;
  PluginPtr int8(create("RMSNormQuant", {})), fp8(create("RMSNormQuant", {int_field("quant_dtype", &fp8_code)}));
  expect(int8 && fp8, "RMSNormQuant created (default, quant_dtype 17)");
  if (!int8 || !fp8) return;
  expect(build(int8.get())->getNbOutputs() == 2, "RMSNormQuant has two outputs (Q, Scale)");
  check_quant_types(int8.get(), fp8.get());
  check_quant_shapes(int8.get());
  check_quant_runtime(int8.get());
}

void check_configure() {
  PluginPtr rms(create("RMSNorm", {}));
  auto configure = [&](Dims x, Dims w) {
    DynamicPluginTensorDesc in[2] = {dyn(x), dyn(w)}, out[1] = {dyn(x)};
    return build(rms.get())->configurePlugin(in, 2, out, 1);
  };
  auto shape_change = [&](Dims x, Dims w) {
    PluginTensorDesc in[2] = {desc(x), desc(w)}, out[1] = {desc(x)};
    return runtime(rms.get())->onShapeChange(in, 2, out, 1);
  };
  g_logger.lines.clear();
  expect(configure(dims({4, 64}), dims({32})) != 0 && g_logger.said(kWrongW), "configurePlugin refuses W [32] for X [4, 64]");
  g_logger.lines.clear();
  expect(shape_change(dims({4, 64}), dims({32})) != 0 && g_logger.said(kWrongW), "onShapeChange refuses W [32] for X [4, 64]");
  expect(configure(dims({4, 64}), dims({64})) == 0 && shape_change(dims({2, 3, 64}), dims({64})) == 0, "matching W accepted");
  expect(configure(dims({-1, 64}), dims({64})) == 0 && configure(dims({4, -1}), dims({32})) == 0,
         "dynamic dims accepted while unknown");
  expect(configure(dims({4, 64}), dims({1, 64})) != 0 &&
             g_logger.said("opforge.RMSNorm: W: expected 1-D tensor of length 64 (last dim of X), got shape [1, 64]"),
         "2-D W refused");
  expect(configure(dims({0, 64}), dims({64})) == 0, "empty X accepted");
  PluginPtr swish(create("Swish", {}));
  DynamicPluginTensorDesc in[1] = {dyn(dims({0}))}, out[1] = {dyn(dims({0}))};
  expect(build(swish.get())->configurePlugin(in, 1, out, 1) == 0, "Swish accepts any shape, empty too");
}

void check_clone_attach() {
  const float beta = 2.5f;
  PluginPtr original(create("Swish", {float_field("beta", &beta)}));
  PluginPtr copy(original->clone());
  expect(copy && copy.get() != original.get() && serialized(copy.get()) == serialized(original.get()), "clone keeps beta");
  NoResources context;
  PluginPtr attached(runtime(original.get())->attachToContext(&context));
  expect(attached && attached.get() != original.get() && serialized(attached.get()) == serialized(original.get()) &&
             std::strcmp(core(attached.get())->getPluginName(), "Swish") == 0,
         "attachToContext gives a per-context clone");
  original.reset();
  expect(serialized(attached.get())["beta"].second == 2.5, "the clone outlives the original");
  PluginPtr rms(create("RMSNorm", {}));
  PluginPtr rms_copy(rms->clone());
  expect(rms_copy && std::strcmp(core(rms_copy.get())->getPluginName(), "RMSNorm") == 0, "RMSNorm clone");
}

void check_enqueue() {
  PluginPtr swish(create("Swish", {}));
  PluginPtr rms(create("RMSNorm", {}));
  void* out[1] = {nullptr};
  const void* in[2] = {nullptr, nullptr};
  PluginTensorDesc ints[1] = {desc(dims({4}), DataType::kINT32)};
  expect(runtime(swish.get())->enqueue(ints, ints, in, out, nullptr, nullptr) != 0 &&
             g_logger.said("opforge.Swish: X: expected float32, float16 or bfloat16 tensor, got int32 tensor"),
         "enqueue refuses int32 before any launch");
  PluginTensorDesc empty[2] = {desc(dims({0, 8})), desc(dims({8}))};
  expect(runtime(swish.get())->enqueue(empty, empty, in, out, nullptr, nullptr) == 0 &&
             runtime(rms.get())->enqueue(empty, empty, in, out, nullptr, nullptr) == 0,
         "empty tensors: nothing to launch, success");
  PluginTensorDesc empty_mixed[2] = {desc(dims({0, 8}), DataType::kBF16), desc(dims({8}))};
  expect(runtime(rms.get())->enqueue(empty_mixed, empty_mixed, in, out, nullptr, nullptr) == 0,
         "float32 W with a bfloat16 X accepted at enqueue (empty: nothing to launch)");
  PluginTensorDesc int_w[2] = {desc(dims({2, 8}), DataType::kHALF), desc(dims({8}), DataType::kINT8)};
  g_logger.lines.clear();
  expect(runtime(rms.get())->enqueue(int_w, int_w, in, out, nullptr, nullptr) != 0 &&
             g_logger.said_error("opforge.RMSNorm: W: expected dtype float16 (dtype of X) or float32, got int8"),
         "enqueue refuses an int8 W before any launch");
  int devices = 0;
  if (cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0) {
    std::printf("skip launch-failure check: %d GPU(s) present\n", devices);
    return;
  }
  // No usable GPU: the launch itself fails, and the plugin must say so rather than return 0.
  PluginTensorDesc x[1] = {desc(dims({16}))};
  g_logger.lines.clear();
  expect(runtime(swish.get())->enqueue(x, x, in, out, nullptr, nullptr) != 0 &&
             g_logger.said("opforge.Swish: CUDA kernel launch: expected cudaSuccess, got cuda"),
         "a failed launch is reported with its cudaError_t");
}

// ---- run: one enqueue on the GPU, bytes in and out (tests/test_trt_gpu.py makes and checks them) --
std::vector<char> read_file(const std::string& path) {
  std::vector<char> data;
  if (FILE* f = std::fopen(path.c_str(), "rb")) {
    char buf[1 << 16];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) data.insert(data.end(), buf, buf + n);
    std::fclose(f);
  }
  return data;
}

int64_t volume(const Dims& d) {
  int64_t n = 1;
  for (int32_t k = 0; k < d.nbDims; ++k) n *= d.d[k];
  return n;
}

Dims parse_dims(const std::string& text) {  // "2,3,64"; "" = rank 0
  Dims d{};
  size_t start = 0;
  while (start < text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    d.d[d.nbDims++] = std::stoll(text.substr(start, comma - start));
    start = comma + 1;
  }
  return d;
}

#define CUDA_OK(call)                                                              \
  do {                                                                             \
    cudaError_t e_ = (call);                                                       \
    if (e_ != cudaSuccess) {                                                       \
      std::printf("FAIL %s: %s\n", #call, cudaGetErrorString(e_));                 \
      return 1;                                                                    \
    }                                                                              \
  } while (0)

std::vector<std::string> split(const std::string& text, char sep) {  // "" = no items
  std::vector<std::string> items;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(sep, start);
    if (end == std::string::npos) end = text.size();
    items.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return items;
}

// The plugin as an engine's state rebuilds it (runtime phase): every field the creator declares,
// from ATTRS ("name=value,..."; "-" for none) or the declared default, and format_version.
PluginPtr create_serialized(const std::string& op, const std::string& attrs) {
  const PluginFieldCollection* declared = g_creators.at(op)->getFieldNames();
  std::map<std::string, float> given;
  for (const std::string& item : split(attrs == "-" ? "" : attrs, ','))
    given[item.substr(0, item.find('='))] = std::stof(item.substr(item.find('=') + 1));
  std::deque<float> values;
  std::deque<int32_t> ints;  // an int or enum attribute: an int32 field, as declared
  std::vector<PluginField> fields;
  for (int32_t i = 0; i < declared->nbFields; ++i) {
    const PluginField& f = declared->fields[i];
    const auto it = given.find(f.name);
    if (f.type == PluginFieldType::kINT32) {
      const int32_t v = it != given.end() ? static_cast<int32_t>(it->second) : *static_cast<const int32_t*>(f.data);
      fields.emplace_back(f.name, &ints.emplace_back(v), PluginFieldType::kINT32, 1);
      continue;
    }
    fields.push_back(float_field(f.name, &values.emplace_back(it != given.end() ? it->second
                                                                                : *static_cast<const float*>(f.data))));
  }
  fields.push_back(format_field());
  return PluginPtr(create(op.c_str(), fields, TensorRTPhase::kRUNTIME));
}

size_t element_size(DataType type) {  // float32; int8 and fp8; float16 and bf16
  return type == DataType::kFLOAT ? 4 : type == DataType::kINT8 || type == DataType::kFP8 ? 1 : 2;
}

// The outputs' dims as the plugin infers them from constant input dims. false: refused.
bool infer_output_dims(IPluginV3* plugin, const std::vector<Dims>& in, std::vector<Dims>* out) {
  HostExprBuilder builder;
  std::vector<DimsExprs> exprs(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    exprs[i].nbDims = in[i].nbDims;
    for (int32_t k = 0; k < in[i].nbDims; ++k) exprs[i].d[k] = builder.constant(in[i].d[k]);
  }
  std::vector<DimsExprs> out_exprs(out->size());
  if (build(plugin)->getOutputShapes(exprs.data(), static_cast<int32_t>(in.size()), nullptr, 0, out_exprs.data(),
                                     static_cast<int32_t>(out->size()), builder) != 0)
    return false;
  for (size_t o = 0; o < out->size(); ++o) {
    (*out)[o].nbDims = out_exprs[o].nbDims;
    for (int32_t k = 0; k < out_exprs[o].nbDims; ++k)
      (*out)[o].d[k] = out_exprs[o].d[k]->isConstant() ? out_exprs[o].d[k]->getConstantValue() : -1;
  }
  return true;
}

struct DeviceBuffers {
  std::vector<void*> all;
  ~DeviceBuffers() {
    for (void* p : all) cudaFree(p);
  }
  void* get(size_t bytes) {
    void* p = nullptr;
    if (cudaMalloc(&p, bytes + 16) != cudaSuccess) return nullptr;
    all.push_back(p);
    return p;
  }
};

// run OP TYPE ATTRS OUT[,OUT...] X X_DIMS [IN DIMS]...: one enqueue on the GPU, each input (the
// op's inputs in order) from a file of raw elements, each output (Y[, H]) written to its file.
// TYPE: TensorRT DataType number of every input, or one per input ("1,1,0": a float32 W).
int run(int argc, char** argv) {
  const std::string op = argv[0];
  const std::vector<std::string> type_list = split(argv[1], ',');
  const std::vector<std::string> out_paths = split(argv[3], ',');
  const int nb_inputs = (argc - 4) / 2;
  std::vector<DataType> in_types(nb_inputs);
  for (int i = 0; i < nb_inputs; ++i)
    in_types[i] = static_cast<DataType>(std::stoi(type_list[type_list.size() == 1 ? 0 : i]));
  PluginPtr plugin = create_serialized(op, argv[2]);
  if (!plugin) return std::printf("FAIL createPlugin\n"), 1;
  const int32_t nb_outputs = build(plugin.get())->getNbOutputs();
  if (static_cast<int32_t>(out_paths.size()) != nb_outputs)
    return std::printf("FAIL %s has %d outputs, %zu files given\n", op.c_str(), nb_outputs, out_paths.size()), 1;
  DeviceBuffers buffers;
  std::vector<PluginTensorDesc> in(nb_inputs);
  std::vector<Dims> in_dims(nb_inputs);
  std::vector<const void*> inputs(nb_inputs);
  for (int i = 0; i < nb_inputs; ++i) {
    const std::vector<char> bytes = read_file(argv[4 + 2 * i]);
    in_dims[i] = parse_dims(argv[5 + 2 * i]);
    in[i] = desc(in_dims[i], in_types[i]);
    void* device = buffers.get(bytes.size());
    if (!device) return std::printf("FAIL cudaMalloc\n"), 1;
    CUDA_OK(cudaMemcpy(device, bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
    inputs[i] = device;
  }
  std::vector<Dims> out_dims(nb_outputs);
  if (!infer_output_dims(plugin.get(), in_dims, &out_dims)) return std::printf("FAIL getOutputShapes\n"), 1;
  std::vector<PluginTensorDesc> out(nb_outputs);
  std::vector<void*> outputs(nb_outputs);
  std::vector<size_t> out_bytes(nb_outputs);
  std::vector<DataType> out_types(nb_outputs);  // each output of its own type
  if (build(plugin.get())->getOutputDataTypes(out_types.data(), nb_outputs, in_types.data(), nb_inputs) != 0)
    return std::printf("FAIL getOutputDataTypes\n"), 1;
  for (int32_t o = 0; o < nb_outputs; ++o) {
    out[o] = desc(out_dims[o], out_types[o]);
    out_bytes[o] = element_size(out_types[o]) * static_cast<size_t>(volume(out_dims[o]));
    if (!(outputs[o] = buffers.get(out_bytes[o]))) return std::printf("FAIL cudaMalloc\n"), 1;
  }
  if (runtime(plugin.get())->onShapeChange(in.data(), nb_inputs, out.data(), nb_outputs) != 0)
    return std::printf("FAIL onShapeChange\n"), 1;
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  const int32_t status = runtime(plugin.get())->enqueue(in.data(), out.data(), inputs.data(), outputs.data(), nullptr, stream);
  CUDA_OK(cudaStreamSynchronize(stream));
  cudaStreamDestroy(stream);
  if (status != 0) return std::printf("FAIL enqueue\n"), 1;
  for (int32_t o = 0; o < nb_outputs; ++o) {
    std::vector<char> result(out_bytes[o]);
    CUDA_OK(cudaMemcpy(result.data(), outputs[o], out_bytes[o], cudaMemcpyDeviceToHost));
    FILE* f = std::fopen(out_paths[o].c_str(), "wb");
    if (!f) return std::printf("FAIL cannot write %s\n", out_paths[o].c_str()), 1;
    std::fwrite(result.data(), 1, result.size(), f);
    std::fclose(f);
  }
  std::printf("ok ran %s on the GPU\n", op.c_str());
  return 0;
}

// describe OP: the creator's declared fields ("field NAME TYPE LENGTH DEFAULT") and the number of
// outputs of a plugin made from no fields, for the Python tests to compare with opforge_spec.
int describe_command(const std::string& op) {
  if (!g_creators.count(op)) return std::printf("FAIL no creator %s\n", op.c_str()), 1;
  const PluginFieldCollection* fc = g_creators[op]->getFieldNames();
  for (int32_t i = 0; fc && i < fc->nbFields; ++i) {
    const PluginField& f = fc->fields[i];
    double value = f.type == PluginFieldType::kFLOAT32 && f.data ? *static_cast<const float*>(f.data) : NAN;
    if (f.type == PluginFieldType::kINT32 && f.data) value = *static_cast<const int32_t*>(f.data);
    std::printf("field %s %d %d %.9g\n", f.name, static_cast<int>(f.type), f.length, value);
  }
  PluginPtr plugin(g_creators[op]->createPlugin("node0", nullptr, TensorRTPhase::kBUILD));
  if (!plugin) return std::printf("FAIL createPlugin without fields\n"), 1;
  std::printf("outputs %d\n", build(plugin.get())->getNbOutputs());
  return 0;
}

std::string dims_text(const Dims& d) {
  std::string text;
  for (int32_t k = 0; k < d.nbDims; ++k) text += (k ? "," : "") + std::to_string(d.d[k]);
  return text;
}

// infer OP TYPE:DIMS...: what TensorRT's builder and runtime ask about the tensors, in their order
// (types, shapes, formats at every position, configure, shape change), for inputs of those types
// (DataType numbers) and dims ("2,4"; "" = rank 0). Prints "output I TYPE DIMS" per output, then
// "accepted", or "refused <call>" at the first call that refuses.
int infer_command(int argc, char** argv) {
  PluginPtr plugin(create(argv[0], {}));
  if (!plugin) return std::printf("FAIL createPlugin\n"), 1;
  std::vector<DataType> types;
  std::vector<Dims> in_dims;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    types.push_back(static_cast<DataType>(std::stoi(arg.substr(0, arg.find(':')))));
    in_dims.push_back(parse_dims(arg.substr(arg.find(':') + 1)));
  }
  const auto nb_in = static_cast<int32_t>(types.size());
  const int32_t nb_out = build(plugin.get())->getNbOutputs();
  std::printf("outputs %d\n", nb_out);
  std::vector<DataType> out_types(nb_out);
  if (build(plugin.get())->getOutputDataTypes(out_types.data(), nb_out, types.data(), nb_in) != 0)
    return std::printf("refused getOutputDataTypes\n"), 0;
  std::vector<Dims> out_dims(nb_out);
  if (!infer_output_dims(plugin.get(), in_dims, &out_dims)) return std::printf("refused getOutputShapes\n"), 0;
  std::vector<DynamicPluginTensorDesc> io;
  for (int32_t i = 0; i < nb_in; ++i) io.push_back(dyn(in_dims[i], types[i]));
  for (int32_t o = 0; o < nb_out; ++o) {
    std::printf("output %d %d %s\n", o, static_cast<int>(out_types[o]), dims_text(out_dims[o]).c_str());
    io.push_back(dyn(out_dims[o], out_types[o]));
  }
  for (int32_t pos = 0; pos < nb_in + nb_out; ++pos)
    if (!build(plugin.get())->supportsFormatCombination(pos, io.data(), nb_in, nb_out))
      return std::printf("refused supportsFormatCombination %d\n", pos), 0;
  if (build(plugin.get())->configurePlugin(io.data(), nb_in, io.data() + nb_in, nb_out) != 0)
    return std::printf("refused configurePlugin\n"), 0;
  std::vector<PluginTensorDesc> descs;
  for (const DynamicPluginTensorDesc& d : io) descs.push_back(d.desc);
  if (runtime(plugin.get())->onShapeChange(descs.data(), nb_in, descs.data() + nb_in, nb_out) != 0)
    return std::printf("refused onShapeChange\n"), 0;
  std::printf("accepted\n");
  return 0;
}

// One line per creator getCreators returned: "creator KIND [NAMESPACE NAME VERSION]".
int list_creators(IPluginCreatorInterface* const* creators, int32_t n) {
  for (int32_t i = 0; i < n && creators; ++i) {
    const char* kind = creators[i]->getInterfaceInfo().kind;
    if (std::strcmp(kind, "PLUGIN CREATOR_V3ONE") != 0) {
      std::printf("creator %s\n", kind);
      continue;
    }
    auto* c = static_cast<IPluginCreatorV3One*>(creators[i]);
    std::printf("creator V3ONE %s %s %s\n", c->getPluginNamespace(), c->getPluginName(), c->getPluginVersion());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s LIBRARY CHECK [--no-logger] | LIBRARY gpus | LIBRARY run OP TYPE ATTRS OUT[,OUT] X X_DIMS [IN DIMS]..."
                 " | LIBRARY describe OP | LIBRARY infer OP TYPE:DIMS..."
                 " | LIBRARY create OP build|runtime NAME=f32|f64|i32:VALUE... | LIBRARY list\n", argv[0]);
    return 2;
  }
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    std::printf("FAIL dlopen: %s\n", dlerror());
    return 1;
  }
  auto get_creators = reinterpret_cast<GetCreators>(dlsym(lib, "getCreators"));
  auto set_finder = reinterpret_cast<SetLoggerFinder>(dlsym(lib, "setLoggerFinder"));
  if (!get_creators || !set_finder || !dlsym(lib, "getPluginCreators")) {
    std::printf("FAIL entry points missing\n");
    return 1;
  }
  if (!(argc > 3 && std::strcmp(argv[3], "--no-logger") == 0)) set_finder(&g_finder);
  int32_t n = -1;
  IPluginCreatorInterface* const* creators = get_creators(n);
  expect(n > 0 && creators != nullptr, "getCreators gives creators");
  for (int32_t i = 0; i < n; ++i) {
    auto* c = static_cast<IPluginCreatorV3One*>(creators[i]);
    if (std::strcmp(c->getInterfaceInfo().kind, "PLUGIN CREATOR_V3ONE") == 0) g_creators[c->getPluginName()] = c;
  }
  const std::string check = argv[2];
  if (check == "list") return list_creators(creators, n);
  if (check == "gpus") {
    int devices = 0;
    std::printf("%d\n", cudaGetDeviceCount(&devices) == cudaSuccess ? devices : 0);
    return 0;
  }
  if (check == "run") return argc >= 9 ? run(argc - 3, argv + 3) : 2;
  if (check == "describe") return argc >= 4 ? describe_command(argv[3]) : 2;
  if (check == "infer") return argc >= 4 ? infer_command(argc - 3, argv + 3) : 2;
  if (check == "create") return argc >= 5 ? create_command(argc - 3, argv + 3) : 2;
  const std::map<std::string, void (*)()> checks = {
      {"creators", check_creators}, {"roundtrip", check_roundtrip}, {"bad_fields", check_bad_fields},
      {"formats", check_formats},   {"shapes", check_shapes},       {"configure", check_configure},
      {"clone_attach", check_clone_attach}, {"enqueue", check_enqueue}, {"serialized_state", check_serialized_state},
      {"field_structure", check_field_structure}, {"float32_rule", check_float32_rule},
      {"swiglu", check_swiglu}, {"residual", check_residual}, {"quant", check_quant}};
  if (!checks.count(check)) {
    std::printf("FAIL unknown check %s\n", check.c_str());
    return 2;
  }
  checks.at(check)();
  return g_failures ? 1 : 0;
}
