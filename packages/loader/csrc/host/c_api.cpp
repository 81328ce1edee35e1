// The exported C API: thin wrappers that turn C++ results into status codes + messages, plus the
// host-side validation of every call into a plugin (names, counts, dtypes, ranks, attributes).
#include <algorithm>
#include <cstdio>
#include <exception>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "opforge/loader.h"
#include "registry.h"

#ifndef OPFORGE_LOADER_VERSION
#define OPFORGE_LOADER_VERSION "0.0.0"
#endif

using opforge::loader::OpEntry;

struct OpforgeOpRef {};  // opaque to callers; the pointer is an OpEntry

namespace {

int32_t fill(char* err, size_t len, const char* msg, int32_t status) {
  if (err && len > 0) std::snprintf(err, len, "%s", msg);
  return status;
}

int32_t fill(char* err, size_t len, const std::string& msg, int32_t status) {
  if (err && len > 0) {
    size_t n = std::min(len - 1, msg.size());
    std::memcpy(err, msg.data(), n);
    err[n] = '\0';
  }
  return status;
}

OpEntry* entry_of(const OpforgeOpRef* ref) { return reinterpret_cast<OpEntry*>(const_cast<OpforgeOpRef*>(ref)); }

std::string op_prefix(const OpforgeOpDef* d) { return std::string("opforge.") + d->name + ": "; }

const char* dtype_name(int32_t dt) {
  switch (dt) {
    case OPFORGE_DTYPE_FLOAT32: return "float32";
    case OPFORGE_DTYPE_INT8: return "int8";
    case OPFORGE_DTYPE_INT32: return "int32";
    case OPFORGE_DTYPE_INT64: return "int64";
    case OPFORGE_DTYPE_FLOAT16: return "float16";
    case OPFORGE_DTYPE_FLOAT64: return "float64";
    case OPFORGE_DTYPE_BFLOAT16: return "bfloat16";
    case OPFORGE_DTYPE_FLOAT8E4M3FN: return "float8_e4m3fn";
    default: return "unknown dtype";
  }
}

std::string io_names(const OpforgeIODesc* io, uint32_t n) {
  std::string r;
  for (uint32_t i = 0; i < n; ++i) r += (i ? ", " : "") + std::string(io[i].name);
  return r;
}

std::string shape_text(const OpforgeTensor& t) {
  std::string r = "[";
  for (int32_t i = 0; i < t.rank; ++i) r += (i ? ", " : "") + std::to_string(t.shape[i]);
  return r + "]";
}

// The host guarantees what every plugin would otherwise re-check: count, dtype, rank, shape.
bool check_inputs(const OpforgeOpDef* d, const OpforgeTensor* in, uint32_t n, std::string& msg) {
  if (n != d->num_inputs) {
    msg = op_prefix(d) + "inputs: expected " + std::to_string(d->num_inputs) + " tensors (" +
          io_names(d->inputs, d->num_inputs) + "), got " + std::to_string(n);
    return false;
  }
  for (uint32_t i = 0; i < n; ++i) {
    const OpforgeIODesc& io = d->inputs[i];
    bool ok = io.num_dtypes == 0;
    std::string allowed;
    for (uint32_t k = 0; k < io.num_dtypes; ++k) {
      ok |= io.dtypes[k] == in[i].dtype;
      allowed += (k ? " or " : "") + std::string(dtype_name(io.dtypes[k]));
    }
    if (!ok) {
      msg = op_prefix(d) + io.name + ": expected dtype " + allowed + ", got " + dtype_name(in[i].dtype);
      return false;
    }
    if (in[i].rank < 0 || in[i].rank > OPFORGE_MAX_RANK || (in[i].rank > 0 && !in[i].shape)) {
      msg = op_prefix(d) + io.name + ": expected rank 0.." + std::to_string(OPFORGE_MAX_RANK) + ", got " + std::to_string(in[i].rank);
      return false;
    }
    int64_t numel = 1;
    for (int32_t k = 0; k < in[i].rank; ++k) {
      if (in[i].shape[k] < 0) {
        msg = op_prefix(d) + io.name + ": expected non-negative dimensions, got shape " + shape_text(in[i]);
        return false;
      }
      numel *= in[i].shape[k];
    }
    if (numel > 0 && !in[i].data) {
      msg = op_prefix(d) + io.name + ": expected data for " + std::to_string(numel) + " elements, got NULL";
      return false;
    }
  }
  return true;
}

int32_t plugin_status(const OpforgeOpDef* d, int32_t status, char* buf, char* err, size_t len) {
  if (status == OPFORGE_OK) return status;
  std::string msg = buf[0] ? std::string(buf) : op_prefix(d) + "plugin returned status " + std::to_string(status) + " without a message";
  return fill(err, len, msg, status);
}

// Input tensors and the output count, checked before any call into the plugin.
int32_t check_call(const OpforgeOpDef* d, const OpforgeTensor* inputs, uint32_t n_in, uint32_t n_out, char* err,
                   size_t len) {
  std::string msg;
  if (!check_inputs(d, inputs, n_in, msg)) return fill(err, len, msg, OPFORGE_ERR_INVALID_ARGUMENT);
  if (n_out != d->num_outputs)
    return fill(err, len, op_prefix(d) + "outputs: expected " + std::to_string(d->num_outputs) + ", got " + std::to_string(n_out),
                OPFORGE_ERR_INVALID_ARGUMENT);
  return OPFORGE_OK;
}

// Every extern "C" entry point runs its body through one of these: no C++ exception crosses the
// C ABI. The handlers format with snprintf into the caller's buffer: they allocate nothing, so
// even std::bad_alloc is reported, not rethrown.
template <class Body>
int32_t guarded(const char* fn, char* err, size_t len, Body&& body) noexcept {
  char msg[512];
  try {
    return body();
  } catch (const std::bad_alloc&) {
    std::snprintf(msg, sizeof msg, "opforge-loader: %s: out of memory", fn);
    return fill(err, len, msg, OPFORGE_ERR_OUT_OF_MEMORY);
  } catch (const std::exception& e) {
    std::snprintf(msg, sizeof msg, "opforge-loader: %s: internal error: %s", fn, e.what());
  } catch (...) {
    std::snprintf(msg, sizeof msg, "opforge-loader: %s: internal error: unknown exception", fn);
  }
  return fill(err, len, msg, OPFORGE_ERR_INTERNAL);
}

// For entry points that return no status: the failure is dropped (nothing to report it through).
template <class Body>
void guarded_void(Body&& body) noexcept {
  try {
    body();
  } catch (...) {
  }
}

// A NULL where the API needs a pointer: a status, never a crash.
int32_t null_argument(const char* fn, const char* what, char* err, size_t len) {
  char msg[256];
  std::snprintf(msg, sizeof msg, "opforge-loader: %s: expected %s, got NULL", fn, what);
  return fill(err, len, msg, OPFORGE_ERR_INVALID_ARGUMENT);
}

// A call into a plugin with tensors in and out: guarded, NULLs refused, the host's argument check
// first, the plugin's own message (bounded buffer) turned into the status.
template <class Call>
int32_t plugin_call(const char* fn, const OpforgeOpRef* ref, const OpforgeTensor* inputs, uint32_t n_in,
                    const void* outputs, uint32_t n_out, char* err, size_t len, Call&& call) noexcept {
  return guarded(fn, err, len, [&]() -> int32_t {
    if (!ref || (n_in > 0 && !inputs) || (n_out > 0 && !outputs))
      return null_argument(fn, !ref ? "an op reference" : !outputs ? "outputs" : "inputs", err, len);
    const OpforgeOpDef* d = entry_of(ref)->def;
    if (int32_t bad = check_call(d, inputs, n_in, n_out, err, len)) return bad;
    char buf[1024] = {0};
    return plugin_status(d, call(d, buf, sizeof(buf) - 1), buf, err, len);
  });
}

// A registry operation taking one string argument (`what` names it in the NULL message): guarded,
// NULLs refused, the registry's message copied out on failure.
template <class Call>
int32_t registry_call(const char* fn, OpforgeRegistry* reg, const char* arg, const char* what, char* err,
                      size_t len, Call&& call) noexcept {
  return guarded(fn, err, len, [&]() -> int32_t {
    if (!reg || !arg) return null_argument(fn, reg ? what : "a registry", err, len);
    std::string e;
    int32_t s = call(e);
    return s ? fill(err, len, e, s) : s;
  });
}

// Attributes named by the caller, checked against the schema, defaults filled in schema order.
int32_t create_instance(const OpforgeOpDef* d, const OpforgeAttrValue* attrs, uint32_t n, void** instance, char* err,
                        size_t len) {
  std::vector<OpforgeAttrValue> full(d->num_attrs);
  std::vector<bool> given(d->num_attrs, false);
  std::string names;
  for (uint32_t k = 0; k < d->num_attrs; ++k) names += (k ? ", " : "") + std::string(d->attrs[k].name);
  for (uint32_t k = 0; k < d->num_attrs; ++k) {
    const OpforgeAttrSchema& s = d->attrs[k];
    full[k] = OpforgeAttrValue{s.name, s.type, s.default_float, s.default_int, s.default_string};
  }
  for (uint32_t i = 0; i < n; ++i) {
    if (!attrs[i].name) return null_argument("opforge_op_create", "an attribute name", err, len);
    uint32_t k = 0;
    while (k < d->num_attrs && std::strcmp(d->attrs[k].name, attrs[i].name) != 0) ++k;
    if (k == d->num_attrs)
      return fill(err, len, op_prefix(d) + attrs[i].name + ": expected one of the attributes [" + names + "], got an unknown attribute",
                  OPFORGE_ERR_INVALID_ARGUMENT);
    const OpforgeAttrSchema& s = d->attrs[k];
    OpforgeAttrValue v = attrs[i];
    if (s.type == OPFORGE_ATTR_FLOAT && v.type == OPFORGE_ATTR_INT) { v.f = double(v.i); v.type = OPFORGE_ATTR_FLOAT; }
    if (v.type != s.type) {
      static const char* tn[] = {"?", "float", "int", "string"};
      auto name_of = [](int32_t t) { return t >= 1 && t <= 3 ? tn[t] : tn[0]; };
      return fill(err, len, op_prefix(d) + s.name + ": expected " + name_of(s.type) + " attribute, got " + name_of(v.type),
                  OPFORGE_ERR_INVALID_ARGUMENT);
    }
    v.name = s.name;
    full[k] = v;
    given[k] = true;
  }
  for (uint32_t k = 0; k < d->num_attrs; ++k)
    if (d->attrs[k].required && !given[k])
      return fill(err, len, op_prefix(d) + d->attrs[k].name + ": expected a value (required attribute), got none",
                  OPFORGE_ERR_INVALID_ARGUMENT);
  char buf[1024] = {0};
  *instance = nullptr;
  return plugin_status(d, d->create(full.data(), d->num_attrs, instance, buf, sizeof(buf) - 1), buf, err, len);
}

int32_t check_manifest_file(const char* manifest_path, const char* runtime_version, char* err, size_t len) {
  using namespace opforge::loader;
  Manifest m;
  std::string reason;
  FileId id;
  const std::string mp = absolute_path(manifest_path);
  auto refuse = [&](const std::string& file) {
    return fill(err, len, "opforge-loader: refused " + file + ": " + reason, OPFORGE_ERR_REFUSED);
  };
  if (!read_manifest(mp, m, reason)) return refuse(mp);
  if (!check_not_world_writable(mp, reason) || !check_not_world_writable(m.library_path, reason) ||
      !stat_file(m.library_path, id, reason) || !check_sha256(m, m.library_path, id, reason))
    return refuse(m.library_path);
  if (m.kind == "opforge" && !check_opforge_compat(m, OPFORGE_LOADER_VERSION, reason)) return refuse(m.library_path);
  if (m.kind != "opforge" && runtime_version && *runtime_version && !check_sdk_range(m, runtime_version, reason))
    return refuse(m.library_path);
  return OPFORGE_OK;
}

}  // namespace

extern "C" {

const char* opforge_loader_version(void) { return OPFORGE_LOADER_VERSION; }
uint32_t opforge_loader_api_version(void) { return OPFORGE_PLUGIN_API_VERSION; }

OpforgeRegistry* opforge_registry_create(void) {
  OpforgeRegistry* reg = nullptr;
  guarded_void([&] { reg = new OpforgeRegistry(); });
  return reg;
}

void opforge_registry_destroy(OpforgeRegistry* reg) {
  guarded_void([&] {
    if (reg && !reg->impl.writing_on_this_thread()) delete reg;  // else it would wait for itself
  });
}

void opforge_registry_set_log(OpforgeRegistry* reg, OpforgeLogFn fn, void* user) {
  guarded_void([&] {
    if (reg) reg->impl.set_log(fn, user);
  });
}

void opforge_registry_set_admit(OpforgeRegistry* reg, OpforgeAdmitFn fn, void* user) {
  guarded_void([&] {
    if (reg) reg->impl.set_admit(fn, user);
  });
}

int32_t opforge_registry_load(OpforgeRegistry* reg, const char* path, char* err, size_t len) {
  return registry_call(__func__, reg, path, "a library path", err, len,
                       [&](std::string& e) { return reg->impl.load(path, e); });
}

int32_t opforge_registry_load_dir(OpforgeRegistry* reg, const char* dir, uint32_t* loaded, uint32_t* refused,
                                  char* err, size_t len) {
  return registry_call(__func__, reg, dir, "a directory", err, len,
                       [&](std::string& e) { return reg->impl.load_dir(dir, loaded, refused, e); });
}

int32_t opforge_registry_unload(OpforgeRegistry* reg, const char* name, char* err, size_t len) {
  return registry_call(__func__, reg, name, "a plugin name", err, len,
                       [&](std::string& e) { return reg->impl.unload(name, e); });
}

int32_t opforge_registry_reload(OpforgeRegistry* reg, const char* path, char* err, size_t len) {
  return registry_call(__func__, reg, path, "a library path", err, len,
                       [&](std::string& e) { return reg->impl.reload(path, e); });
}

int32_t opforge_registry_sync_dir(OpforgeRegistry* reg, const char* dir, uint32_t* changes, char* err, size_t len) {
  return registry_call(__func__, reg, dir, "a directory", err, len,
                       [&](std::string& e) { return reg->impl.sync_dir(dir, changes, e); });
}

void opforge_registry_enumerate(OpforgeRegistry* reg, OpforgeOpVisitor fn, void* user) {
  guarded_void([&] {
    if (reg && fn) reg->impl.enumerate(fn, user);
  });
}

uint32_t opforge_registry_plugin_count(OpforgeRegistry* reg) {
  uint32_t n = 0;
  guarded_void([&] {
    if (reg) n = reg->impl.plugin_count();
  });
  return n;
}

int32_t opforge_acquire(OpforgeRegistry* reg, const char* name, uint32_t major, OpforgeOpRef** out, char* err,
                        size_t len) {
  const char* fn = __func__;
  return guarded(fn, err, len, [&]() -> int32_t {
    if (!reg || !name || !out)
      return null_argument(fn, !reg ? "a registry" : !name ? "an op name" : "an output pointer", err, len);
    std::string e;
    OpEntry* entry = nullptr;
    int32_t s = reg->impl.acquire(name, major, &entry, e);
    if (s) return fill(err, len, e, s);
    *out = reinterpret_cast<OpforgeOpRef*>(entry);
    return OPFORGE_OK;
  });
}

void opforge_release(OpforgeOpRef* ref) {
  guarded_void([&] {
    if (ref) entry_of(ref)->release();
  });
}

const OpforgeOpDef* opforge_ref_def(const OpforgeOpRef* ref) { return ref ? entry_of(ref)->def : nullptr; }
const char* opforge_ref_plugin_version(const OpforgeOpRef* ref) {
  return ref ? entry_of(ref)->lib->version.c_str() : nullptr;
}

int32_t opforge_op_create(const OpforgeOpRef* ref, const OpforgeAttrValue* attrs, uint32_t n, void** instance,
                          char* err, size_t len) {
  const char* fn = __func__;
  return guarded(fn, err, len, [&]() -> int32_t {
    if (!ref || !instance || (n > 0 && !attrs))
      return null_argument(fn, !ref ? "an op reference" : !instance ? "an instance pointer" : "attributes", err, len);
    return create_instance(entry_of(ref)->def, attrs, n, instance, err, len);
  });
}

void opforge_op_destroy(const OpforgeOpRef* ref, void* instance) {
  guarded_void([&] {
    if (ref && instance) entry_of(ref)->def->destroy(instance);
  });
}

int32_t opforge_op_output_shapes(const OpforgeOpRef* ref, void* instance, const OpforgeTensor* inputs, uint32_t n_in,
                                 OpforgeTensorDesc* outputs, uint32_t n_out, char* err, size_t len) {
  return plugin_call(__func__, ref, inputs, n_in, outputs, n_out, err, len,
                     [&](const OpforgeOpDef* d, char* buf, size_t size) {
                       return d->output_shapes(instance, inputs, n_in, outputs, n_out, buf, size);
                     });
}

int32_t opforge_op_compute(const OpforgeOpRef* ref, void* instance, const OpforgeTensor* inputs, uint32_t n_in,
                           OpforgeTensor* outputs, uint32_t n_out, char* err, size_t len) {
  return plugin_call(__func__, ref, inputs, n_in, outputs, n_out, err, len,
                     [&](const OpforgeOpDef* d, char* buf, size_t size) {
                       return d->compute(instance, inputs, n_in, outputs, n_out, buf, size);
                     });
}

int32_t opforge_manifest_check(const char* manifest_path, const char* runtime_version, char* err, size_t len) {
  const char* fn = __func__;
  return guarded(fn, err, len, [&]() -> int32_t {
    if (!manifest_path) return null_argument(fn, "a manifest path", err, len);
    return check_manifest_file(manifest_path, runtime_version, err, len);
  });
}

}  // extern "C"
