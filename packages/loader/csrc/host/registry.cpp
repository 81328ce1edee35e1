#include "registry.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "image.h"
#include "text.h"

#ifndef OPFORGE_LOADER_VERSION
#define OPFORGE_LOADER_VERSION "0.0.0"
#endif

namespace fs = std::filesystem;

namespace opforge::loader {

namespace {

// The registries whose writer lock this thread holds (a hook may load into another registry) and
// what runs under it now, a plugin hook or a callback: named by the refusal of a re-entrant call.
thread_local std::vector<const Registry*> t_writing;
thread_local const std::string* t_running = nullptr;

class Running {
 public:
  explicit Running(std::string what) : what_(std::move(what)), outer_(t_running) { t_running = &what_; }
  ~Running() { t_running = outer_; }
  Running(const Running&) = delete;
  Running& operator=(const Running&) = delete;

 private:
  std::string what_;
  const std::string* outer_;
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// logging

void Logger::set(OpforgeLogFn fn, void* user) {
  std::lock_guard<std::mutex> lock(mu_);
  fn_ = fn;
  user_ = user;
}

void Logger::log(int32_t level, const std::string& line) {
  std::lock_guard<std::mutex> lock(mu_);
  if (fn_) {
    Running running("a log callback");
    fn_(user_, level, line.c_str());
    return;
  }
  const char* env = std::getenv("OPFORGE_LOADER_LOG");
  if (env && *env && std::strcmp(env, "0") != 0) std::fprintf(stderr, "%s\n", line.c_str());
}

const char* state_name(int32_t state) {
  static const char* names[] = {"Loaded", "Registered", "Initializing", "Running", "Unregistering"};
  return state >= 0 && state <= 4 ? names[state] : "?";
}

namespace {

std::string op_label(const OpforgeOpDef* def) {
  return std::string(def->domain ? def->domain : "") + "::" + def->name + "@" + std::to_string(def->version_major);
}

std::string quoted(const std::string& s) { return "\"" + printable(s, 4096) + "\""; }

}  // namespace

void OpEntry::transition(int32_t to) {
  int32_t from = state.exchange(to);
  lib->log->log(OPFORGE_LOG_INFO, "opforge-loader state plugin=" + lib->name + " version=" + lib->version +
                                      " op=" + op_label(def) + " from=" + (from == to ? "-" : state_name(from)) +
                                      " to=" + state_name(to) + " refs=" + std::to_string(refs()));
}

void OpEntry::release() {
  if (count.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
}

void Library::close_image() {
  if (image_fd >= 0) ::close(image_fd);
  image_fd = -1;
}

Library::~Library() {
  if (handle) {
    if (initialized && plugin && plugin->unload) {
      Running running("the unload hook of plugin " + name + " " + version);
      try {
        plugin->unload();
      } catch (...) {  // a C++ plugin breaking the C ABI must not terminate the host
      }
    }
    ::dlclose(handle);
    log->log(OPFORGE_LOG_INFO, "opforge-loader dlclose plugin=" + name + " version=" + version + " file=" + path);
  }
  close_dependencies(dependencies);  // after the plugin, which may still call them in its destructors
  close_image();
  if (handle && !mapping_released(dlopen_path))
    log->log(OPFORGE_LOG_WARNING, "opforge-loader resident plugin=" + name + " version=" + version + " file=" + path +
                                      " reason=\"the library stays mapped after dlclose (nodelete)\"");
}

// ---------------------------------------------------------------------------------------------
// load helpers

namespace {

// dlopen's error naming the real file; for a dependency it could not find, where $ORIGIN was
// looked up (the plugin's own directory, not the /proc/self/fd it is mapped from).
std::string dlopen_failure(const char* error, const std::string& dlopen_path, const std::string& path,
                           const OriginDependencies& deps) {
  std::string text = with_real_path(error ? error : "?", dlopen_path, path);
  std::string hint = " (check `ldd` / `opforge-loader doctor`";
  if (text.find("cannot open shared object file") != std::string::npos && !deps.origin_dirs.empty()) {
    hint += "; $ORIGIN in the plugin's search path was looked up in ";
    for (size_t i = 0; i < deps.origin_dirs.size(); ++i) hint += (i ? ", " : "") + printable(deps.origin_dirs[i], 300);
    hint += ", then the default search path";
  }
  return "dlopen failed: " + printable(text, 2000, false) + hint + ")";
}

bool validate_plugin_struct(const OpforgePlugin* p, const Manifest& m, std::string& reason) {
  if (p->api_version < OPFORGE_PLUGIN_API_VERSION_MIN || p->api_version > OPFORGE_PLUGIN_API_VERSION) {
    reason = "api_version " + std::to_string(p->api_version) + " out of range: this host supports [" +
             std::to_string(OPFORGE_PLUGIN_API_VERSION_MIN) + ", " + std::to_string(OPFORGE_PLUGIN_API_VERSION) + "]";
    return false;
  }
  if (int64_t(p->api_version) != m.api_version) {
    reason = "api_version mismatch: manifest says " + std::to_string(m.api_version) + ", library says " + std::to_string(p->api_version);
    return false;
  }
  if (p->struct_size < sizeof(OpforgePlugin)) { reason = "OpforgePlugin.struct_size too small"; return false; }
  if (!p->name || m.name != p->name || !p->version || m.version != p->version) {
    reason = "plugin identity mismatch: manifest says " + m.name + " " + m.version + ", library says " +
             (p->name ? p->name : "(null)") + " " + (p->version ? p->version : "(null)");
    return false;
  }
  std::set<std::string> in_lib, in_manifest;
  for (uint32_t i = 0; i < p->num_ops; ++i) {
    const OpforgeOpDef& d = p->ops[i];
    if (!d.name || !d.create || !d.destroy || !d.output_shapes || !d.compute || d.version_major == 0) {
      reason = "op #" + std::to_string(i) + " is incomplete (name, version_major >= 1 and all four functions are required)";
      return false;
    }
    if (!in_lib.insert(std::string(d.domain ? d.domain : "") + "::" + d.name + "@" + std::to_string(d.version_major)).second) {
      reason = "duplicate op " + op_label(&d) + " inside the library";
      return false;
    }
  }
  for (const ManifestOp& o : m.ops) in_manifest.insert(o.domain + "::" + o.name + "@" + std::to_string(o.version));
  if (in_lib != in_manifest) {
    auto join = [](const std::set<std::string>& s) { std::string r; for (auto& x : s) r += (r.empty() ? "" : ", ") + x; return r; };
    reason = "ops mismatch: manifest lists [" + join(in_manifest) + "], library provides [" + join(in_lib) + "]";
    return false;
  }
  return true;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Registry

class Registry::WriterLock {
 public:
  explicit WriterLock(Registry& registry) : lock_(registry.writer_) { t_writing.push_back(&registry); }
  ~WriterLock() { t_writing.pop_back(); }
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;

 private:
  std::lock_guard<std::mutex> lock_;
};

Registry::Registry() : log_(std::make_shared<Logger>()) {}

Registry::~Registry() {
  WriterLock w(*this);
  std::vector<std::string> names;
  {
    std::shared_lock<WriterPreferringMutex> r(mu_);
    for (auto& kv : plugins_) names.push_back(kv.first);
  }
  std::string err;
  for (auto& n : names) unload_locked(n, err);
}

bool Registry::writing_on_this_thread() const {
  return std::find(t_writing.begin(), t_writing.end(), this) != t_writing.end();
}

// writer_ is not recursive: a second lock on this thread would wait for itself forever.
int32_t Registry::refuse_reentry(const char* call, std::string& err) const {
  if (!writing_on_this_thread()) return OPFORGE_OK;
  err = std::string("opforge-loader: ") + call + ": refused a re-entrant call from " +
        (t_running ? *t_running : std::string("code run by this registry")) +
        ": this registry is loading or unloading on this thread and holds its writer lock "
        "(make the call after the hook or callback has returned)";
  return OPFORGE_ERR_REENTRANT;
}

void Registry::set_admit(OpforgeAdmitFn fn, void* user) {
  std::lock_guard<std::mutex> lock(admit_mu_);
  admit_fn_ = fn;
  admit_user_ = user;
}

// One call of the admit callback for the whole batch; each entry starts refused.
void Registry::admit(std::vector<Pending>& batch) {
  OpforgeAdmitFn fn;
  void* user;
  {
    std::lock_guard<std::mutex> lock(admit_mu_);
    fn = admit_fn_;
    user = admit_user_;
  }
  for (Pending& p : batch) p.admitted = !fn;
  if (!fn || batch.empty()) return;
  std::vector<std::vector<const char*>> dependencies(batch.size());
  std::vector<std::vector<char>> reasons(batch.size(), std::vector<char>(1024, '\0'));
  std::vector<OpforgeAdmission> asks(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    for (const OriginDependency& dep : batch[i].deps.found) dependencies[i].push_back(dep.path.c_str());
    asks[i] = OpforgeAdmission{batch[i].lib->path.c_str(), batch[i].lib->image_fd,
                               static_cast<uint32_t>(dependencies[i].size()), dependencies[i].data(),
                               OPFORGE_ERR_REFUSED, reasons[i].data(), reasons[i].size() - 1};
  }
  Running running("the admit callback");
  try {
    fn(user, asks.data(), static_cast<uint32_t>(asks.size()));
  } catch (...) {  // a C++ callback breaking the C ABI: everything it was asked about is refused
    for (OpforgeAdmission& a : asks) {
      a.status = OPFORGE_ERR_REFUSED;
      std::snprintf(a.err, a.err_len, "the admit callback threw a C++ exception");
    }
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    reasons[i].back() = '\0';
    batch[i].admitted = asks[i].status == OPFORGE_OK;
    if (!batch[i].admitted)
      batch[i].refusal = reasons[i][0] ? printable(reasons[i].data(), 1000)
                                       : "refused by the admit callback (status " + std::to_string(asks[i].status) + ")";
  }
}

int32_t Registry::refuse(const std::string& path, const std::string& reason, int32_t status, std::string& err) {
  err = "opforge-loader: refused " + path + ": " + reason;
  log_->log(OPFORGE_LOG_ERROR, "opforge-loader refuse file=" + path + " reason=" + quoted(reason));
  return status;
}

std::string Registry::find_duplicate(const Manifest& m, const std::string& replacing) {
  std::shared_lock<WriterPreferringMutex> r(mu_);
  for (const ManifestOp& o : m.ops) {
    auto it = ops_.find(o.name);
    if (it == ops_.end()) continue;
    auto e = it->second.find(uint32_t(o.version));
    if (e != it->second.end() && e->second->lib->name != replacing)
      return "duplicate op " + o.name + " version " + std::to_string(o.version) + ": already registered by plugin " +
             e->second->lib->name + " (" + e->second->lib->path + ")";
  }
  return "";
}

int32_t Registry::load(const std::string& path, std::string& err) {
  if (int32_t s = refuse_reentry("opforge_registry_load", err)) return s;
  WriterLock w(*this);
  return load_locked(path, Mode::Load, "", err);
}

int32_t Registry::reload(const std::string& path, std::string& err) {
  if (int32_t s = refuse_reentry("opforge_registry_reload", err)) return s;
  WriterLock w(*this);
  return load_locked(path, Mode::Reload, "", err);
}

int32_t Registry::load_locked(const std::string& path, Mode mode, const std::string& source_dir, std::string& err) {
  std::vector<Pending> batch(1);
  if (int32_t s = prepare(path, mode, source_dir, batch[0], err)) return s;
  admit(batch);
  return finish(batch[0], err);
}

// Everything up to dlopen looks only at files: a refused library never runs any code. On success
// out holds the verified image and the dependencies to open, ready for admission.
int32_t Registry::prepare(const std::string& raw_path, Mode mode, const std::string& source_dir, Pending& out,
                          std::string& err) {
  const std::string path = absolute_path(raw_path);
  std::string reason;
  FileId lib_id, manifest_id;
  Manifest& m = out.manifest;
  out.mode = mode;
  if (!stat_file(path, lib_id, reason)) return refuse(path, reason, OPFORGE_ERR_NOT_FOUND, err);
  if (!check_not_world_writable(path, reason)) return refuse(path, reason, OPFORGE_ERR_REFUSED, err);
  const std::string mpath = manifest_path_for(path);
  if (!read_manifest(mpath, m, reason)) return refuse(path, reason, OPFORGE_ERR_REFUSED, err);
  if (!check_not_world_writable(mpath, reason) || !stat_file(mpath, manifest_id, reason))
    return refuse(path, reason, OPFORGE_ERR_REFUSED, err);
  if (m.kind != "opforge")
    return refuse(path, "kind \"" + m.kind + "\" is not loaded by the opforge host (use " +
                            (m.kind == "onnxruntime" ? "register_with_onnxruntime" : "the TensorRT plugin registry") + ")",
                  OPFORGE_ERR_REFUSED, err);
  if (!check_opforge_compat(m, OPFORGE_LOADER_VERSION, reason)) return refuse(path, reason, OPFORGE_ERR_REFUSED, err);
  out.lib = std::make_shared<Library>();
  Library& lib = *out.lib;
  lib.path = path;
  if (int32_t s = check_registry_state(out, err)) return s;

  // Read once, hash, map those very bytes (see image.h).
  LibraryImage image;
  if (!make_library_image(path, image, reason)) return refuse(path, reason, OPFORGE_ERR_REFUSED, err);
  lib.image_fd = image.fd;  // from here on, ~Library closes it (and the handle)
  lib.dlopen_path = image.dlopen_path;
  lib.log = log_;
  lib.name = m.name; lib.version = m.version; lib.kind = m.kind;
  lib.source_dir = source_dir;
  lib.library_id = image.source_id; lib.manifest_id = manifest_id;
  if (!check_digest(m, image.sha256, reason)) return refuse(path, reason, OPFORGE_ERR_REFUSED, err);
  if (!check_image_header(image, reason)) return refuse(path, reason, OPFORGE_ERR_REFUSED, err);
  if (!check_origin_dependencies(image, path, out.deps, reason)) return refuse(path, reason, OPFORGE_ERR_REFUSED, err);
  return OPFORGE_OK;
}

// Loaded already, not loaded for a reload, or an op another plugin registered: asked before the
// image is made and again before it is mapped (a batch may hold two plugins that collide).
int32_t Registry::check_registry_state(const Pending& p, std::string& err) {
  const Manifest& m = p.manifest;
  const std::string& path = p.lib->path;
  bool loaded_already;
  {
    std::shared_lock<WriterPreferringMutex> r(mu_);
    loaded_already = plugins_.count(m.name) > 0;
  }
  if (p.mode == Mode::Load && loaded_already)
    return refuse(path, "plugin " + m.name + " is already loaded (use reload to replace it)", OPFORGE_ERR_REFUSED, err);
  if (p.mode == Mode::Reload && !loaded_already)
    return refuse(path, "reload of plugin " + m.name + ", which is not loaded", OPFORGE_ERR_NOT_FOUND, err);
  std::string dup = find_duplicate(m, p.mode == Mode::Reload ? m.name : "");
  if (!dup.empty()) return refuse(path, dup, OPFORGE_ERR_REFUSED, err);
  return OPFORGE_OK;
}

// The admitted image mapped after its $ORIGIN dependencies; its entry called and checked.
int32_t Registry::map_library(Pending& p, std::string& err) {
  Library& lib = *p.lib;
  const std::string& path = lib.path;
  std::string reason;
  OriginDependencies& deps = p.deps;  // opened before the plugin is mapped, so that glibc finds them loaded
  if (!open_origin_dependencies(path, deps, reason)) return refuse(path, reason, OPFORGE_ERR_REFUSED, err);
  lib.dependencies = std::move(deps.handles);
  for (const std::string& line : deps.warnings) log_->log(OPFORGE_LOG_WARNING, line);
  lib.handle = ::dlopen(lib.dlopen_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  lib.close_image();  // mapped (or refused): its name is never reused (image.h), the descriptor can go
  if (!lib.handle) return refuse(path, dlopen_failure(::dlerror(), lib.dlopen_path, path, deps), OPFORGE_ERR_REFUSED, err);
  ::dlerror();
  auto entry = reinterpret_cast<OpforgePluginEntryFn>(::dlsym(lib.handle, OPFORGE_PLUGIN_ENTRY_SYMBOL));
  if (!entry)
    return refuse(path, std::string("missing entry symbol ") + OPFORGE_PLUGIN_ENTRY_SYMBOL +
                            " (not exported: declare it with OPFORGE_PLUGIN_EXPORT, keep it in the version script; check with nm -D)",
                  OPFORGE_ERR_REFUSED, err);
  lib.plugin = entry();
  if (!lib.plugin) return refuse(path, std::string(OPFORGE_PLUGIN_ENTRY_SYMBOL) + "() returned NULL", OPFORGE_ERR_REFUSED, err);
  if (!validate_plugin_struct(lib.plugin, p.manifest, reason)) return refuse(path, reason, OPFORGE_ERR_REFUSED, err);
  return OPFORGE_OK;
}

// From an admitted image to registered ops: mapped, init run, the entries swapped in.
int32_t Registry::finish(Pending& p, std::string& err) {
  if (!p.admitted) return refuse(p.lib->path, p.refusal, OPFORGE_ERR_REFUSED, err);
  if (int32_t s = check_registry_state(p, err)) return s;
  if (int32_t s = map_library(p, err)) return s;
  std::shared_ptr<Library> lib = p.lib;
  const Manifest& m = p.manifest;
  const std::string& path = lib->path;
  const Mode mode = p.mode;

  std::vector<OpEntry*> fresh;
  for (uint32_t i = 0; i < lib->plugin->num_ops; ++i) {
    auto* e = new OpEntry();
    e->lib = lib;
    e->def = &lib->plugin->ops[i];
    e->transition(OPFORGE_STATE_LOADED);
    fresh.push_back(e);
  }
  for (OpEntry* e : fresh) e->transition(OPFORGE_STATE_REGISTERED);
  for (OpEntry* e : fresh) e->transition(OPFORGE_STATE_INITIALIZING);
  if (lib->plugin->init) {
    char buf[1024] = {0};
    OpforgeHostInfo host{OPFORGE_PLUGIN_API_VERSION, OPFORGE_LOADER_VERSION};
    int32_t status = OPFORGE_ERR_INTERNAL;
    Running running("the init hook of plugin " + m.name + " " + m.version);
    try {
      status = lib->plugin->init(&host, buf, sizeof(buf) - 1);
    } catch (...) {  // a C++ plugin breaking the C ABI: refuse it instead of terminating the host
      std::snprintf(buf, sizeof(buf), "init threw a C++ exception (no exception may cross the plugin ABI)");
    }
    if (status != OPFORGE_OK) {
      retire(fresh);
      return refuse(path, "init failed (status " + std::to_string(status) + "): " + (buf[0] ? printable(buf, 1000) : "no message"),
                    OPFORGE_ERR_INIT_FAILED, err);
    }
  }
  lib->initialized = true;

  std::vector<OpEntry*> old;
  {
    std::unique_lock<WriterPreferringMutex> wlock(mu_);
    auto it = plugins_.find(m.name);
    if (it != plugins_.end()) {
      old = it->second.entries;
      for (OpEntry* e : old) {
        auto& majors = ops_[e->def->name];
        auto f = majors.find(e->def->version_major);
        if (f != majors.end() && f->second == e) majors.erase(f);
        if (majors.empty()) ops_.erase(e->def->name);
      }
    }
    for (OpEntry* e : fresh) ops_[e->def->name][e->def->version_major] = e;
    plugins_[m.name] = Plugin{lib, fresh};
  }
  for (OpEntry* e : fresh) e->transition(OPFORGE_STATE_RUNNING);
  retire(old);
  if (mode == Mode::Reload) {
    log_->log(OPFORGE_LOG_INFO, "opforge-loader reload plugin=" + m.name + " version=" + m.version + " file=" + path);
  }
  return OPFORGE_OK;
}

// Entries already removed from the lookup maps: mark, log, drop the registry's reference.
void Registry::retire(std::vector<OpEntry*>& entries) {
  for (OpEntry* e : entries) {
    e->transition(OPFORGE_STATE_UNREGISTERING);  // refs= counts callers only, not the registry
    e->registered.store(false);
  }
  for (OpEntry* e : entries) e->release();
  entries.clear();
}

int32_t Registry::unload(const std::string& plugin, std::string& err) {
  if (int32_t s = refuse_reentry("opforge_registry_unload", err)) return s;
  WriterLock w(*this);
  return unload_locked(plugin, err);
}

int32_t Registry::unload_locked(const std::string& plugin, std::string& err) {
  std::vector<OpEntry*> old;
  {
    std::unique_lock<WriterPreferringMutex> wlock(mu_);
    auto it = plugins_.find(plugin);
    if (it == plugins_.end()) {
      err = "opforge-loader: unload: no plugin named " + plugin + " is loaded";
      return OPFORGE_ERR_NOT_FOUND;
    }
    old = it->second.entries;
    for (OpEntry* e : old) {
      auto& majors = ops_[e->def->name];
      majors.erase(e->def->version_major);
      if (majors.empty()) ops_.erase(e->def->name);
    }
    plugins_.erase(it);
  }
  retire(old);
  return OPFORGE_OK;
}

namespace {

struct Scan {
  std::vector<std::string> manifests;  // sorted
  std::vector<std::string> orphans;    // libops_*.so* without a manifest beside them
};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() > suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

Scan scan_dir(const std::string& dir, std::string& err) {
  Scan out;
  std::vector<std::string> libs;
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end;
  if (ec) { err = "opforge-loader: cannot scan " + dir + ": " + ec.message(); return out; }
  for (; it != end; it.increment(ec)) {
    if (ec) break;
    const std::string name = it->path().filename().string();
    if (ends_with(name, ".manifest.json")) out.manifests.push_back(it->path().string());
    else if (name.rfind("libops_", 0) == 0 && name.find(".so") != std::string::npos &&
             name.find(".manifest.json") == std::string::npos && it->is_regular_file(ec) &&
             !it->is_symlink(ec))
      libs.push_back(it->path().string());
  }
  std::sort(out.manifests.begin(), out.manifests.end());
  std::sort(libs.begin(), libs.end());
  for (const std::string& lib : libs)
    if (!std::binary_search(out.manifests.begin(), out.manifests.end(), manifest_path_for(lib))) out.orphans.push_back(lib);
  return out;
}

std::string library_of(const std::string& manifest_path) {
  return manifest_path.substr(0, manifest_path.size() - std::string(".manifest.json").size());
}

}  // namespace

void Registry::load_batch(std::vector<Pending>& batch, uint32_t& ok, uint32_t& bad) {
  admit(batch);
  for (Pending& p : batch) {
    std::string e;
    if (finish(p, e) == OPFORGE_OK) ++ok; else ++bad;
  }
  batch.clear();
}

int32_t Registry::load_dir(const std::string& dir, uint32_t* loaded, uint32_t* refused, std::string& err) {
  if (int32_t s = refuse_reentry("opforge_registry_load_dir", err)) return s;
  WriterLock w(*this);
  uint32_t ok = 0, bad = 0;
  Scan scan = scan_dir(absolute_path(dir), err);
  if (!err.empty()) return OPFORGE_ERR_NOT_FOUND;
  for (const std::string& lib : scan.orphans) {
    std::string e;
    refuse(absolute_path(lib), "missing manifest " + manifest_path_for(lib) + " (expected next to the library)", OPFORGE_ERR_REFUSED, e);
    ++bad;
  }
  // Admitted OPFORGE_ADMIT_BATCH at a time: one admit call (one child process in the CLI) per
  // batch, and no more memfds open than a batch holds.
  std::vector<Pending> batch;
  for (const std::string& mp : scan.manifests) {
    Manifest m;
    std::string reason, e;
    if (read_manifest(mp, m, reason) && m.kind != "opforge") continue;  // ORT / TRT libraries live here too
    batch.emplace_back();
    if (prepare(library_of(mp), Mode::Load, absolute_path(dir), batch.back(), e) != OPFORGE_OK) {
      batch.pop_back();
      ++bad;
    }
    if (batch.size() == OPFORGE_ADMIT_BATCH) load_batch(batch, ok, bad);
  }
  load_batch(batch, ok, bad);
  if (loaded) *loaded = ok;
  if (refused) *refused = bad;
  return OPFORGE_OK;
}

// A refusal is remembered with the files' ids: the same files are not tried again.
void Registry::sync_batch(std::vector<Pending>& batch,
                          std::vector<std::pair<std::string, std::pair<FileId, FileId>>>& scanned, uint32_t& changed) {
  admit(batch);
  for (size_t i = 0; i < batch.size(); ++i) {
    std::string e;
    if (finish(batch[i], e) == OPFORGE_OK) {
      ++changed;
      reported_refusals_.erase(scanned[i].first);
    } else {
      reported_refusals_[scanned[i].first] = scanned[i].second;
    }
  }
  batch.clear();
  scanned.clear();
}

int32_t Registry::sync_dir(const std::string& raw_dir, uint32_t* changes, std::string& err) {
  if (int32_t s = refuse_reentry("opforge_registry_sync_dir", err)) return s;
  WriterLock w(*this);
  const std::string dir = absolute_path(raw_dir);
  uint32_t changed = 0;
  Scan scan = scan_dir(dir, err);
  if (!err.empty()) return OPFORGE_ERR_NOT_FOUND;
  for (const std::string& lib : scan.orphans) {
    FileId lid;
    std::string reason;
    stat_file(lib, lid, reason);
    auto key = std::make_pair(lid, FileId{});
    auto prev = reported_refusals_.find(lib);
    if (prev == reported_refusals_.end() || prev->second != key) {
      std::string e;
      refuse(absolute_path(lib), "missing manifest " + manifest_path_for(lib) + " (expected next to the library)", OPFORGE_ERR_REFUSED, e);
      reported_refusals_[lib] = key;
    }
  }
  const auto& manifests = scan.manifests;
  // Candidates per plugin name: the highest version wins (a new version under its own file name).
  std::map<std::string, std::pair<Manifest, std::pair<FileId, FileId>>> best;
  std::set<std::string> unreadable;  // a broken update must not take the running version down
  for (const std::string& mp : manifests) {
    Manifest m;
    std::string reason;
    FileId lid, mid;
    std::string lib = library_of(mp);
    stat_file(lib, lid, reason);
    stat_file(mp, mid, reason);
    if (!read_manifest(mp, m, reason)) {
      unreadable.insert(absolute_path(lib));
      auto key = std::make_pair(lid, mid);
      auto prev = reported_refusals_.find(lib);
      if (prev == reported_refusals_.end() || prev->second != key) {
        std::string e;
        refuse(absolute_path(lib), reason, OPFORGE_ERR_REFUSED, e);
        reported_refusals_[lib] = key;
      }
      continue;
    }
    if (m.kind != "opforge") continue;
    auto it = best.find(m.name);
    if (it == best.end() || compare_versions(m.version, it->second.first.version) >= 0)
      best[m.name] = {m, {lid, mid}};
  }
  std::map<std::string, std::pair<std::string, std::pair<FileId, FileId>>> current;  // name -> path, ids
  {
    std::shared_lock<WriterPreferringMutex> r(mu_);
    for (auto& kv : plugins_)
      current[kv.first] = {kv.second.lib->path, {kv.second.lib->library_id, kv.second.lib->manifest_id}};
  }
  std::vector<Pending> batch;  // admitted together, as in load_dir
  std::vector<std::pair<std::string, std::pair<FileId, FileId>>> scanned;  // per pending: library, ids
  for (auto& kv : best) {
    const Manifest& m = kv.second.first;
    auto ids = kv.second.second;
    auto cur = current.find(kv.first);
    if (cur != current.end() && cur->second.first == m.library_path && cur->second.second == ids) continue;
    auto prev = reported_refusals_.find(m.library_path);
    if (prev != reported_refusals_.end() && prev->second == ids) continue;  // same files, same refusal
    std::string e;
    Mode mode = cur == current.end() ? Mode::Load : Mode::Reload;
    batch.emplace_back();
    if (prepare(m.library_path, mode, dir, batch.back(), e) != OPFORGE_OK) {
      batch.pop_back();
      reported_refusals_[m.library_path] = ids;
      continue;
    }
    scanned.emplace_back(m.library_path, ids);
    if (batch.size() == OPFORGE_ADMIT_BATCH) sync_batch(batch, scanned, changed);
  }
  sync_batch(batch, scanned, changed);
  for (auto& kv : current) {
    std::shared_ptr<Library> lib;
    {
      std::shared_lock<WriterPreferringMutex> r(mu_);
      auto it = plugins_.find(kv.first);
      if (it != plugins_.end()) lib = it->second.lib;
    }
    if (lib && lib->source_dir == dir && !best.count(kv.first) && !unreadable.count(lib->path)) {
      std::string e;
      if (unload_locked(kv.first, e) == OPFORGE_OK) ++changed;
    }
  }
  if (changes) *changes = changed;
  return OPFORGE_OK;
}

void Registry::enumerate(OpforgeOpVisitor fn, void* user) {
  std::shared_lock<WriterPreferringMutex> r(mu_);
  for (auto& kv : plugins_) {
    for (OpEntry* e : kv.second.entries) {
      const Library& lib = *e->lib;
      const OpforgeOpDef* d = e->def;
      OpforgeOpInfo info{lib.name.c_str(), lib.version.c_str(), lib.path.c_str(), lib.kind.c_str(),
                         d->domain ? d->domain : "", d->name, d->version_major, d->version_minor,
                         d->description ? d->description : "", e->state.load(), e->refs(),
                         d->num_inputs, d->num_outputs, d->num_attrs, d};
      fn(user, &info);
    }
  }
}

uint32_t Registry::plugin_count() {
  std::shared_lock<WriterPreferringMutex> r(mu_);
  return static_cast<uint32_t>(plugins_.size());
}

int32_t Registry::acquire(const char* raw_name, uint32_t major, OpEntry** out, std::string& err) {
  const char* name = raw_name;
  if (const char* sep = std::strstr(raw_name, "::")) name = sep + 2;  // "domain::Op" or "Op"
  {
    std::shared_lock<WriterPreferringMutex> r(mu_);
    auto it = ops_.find(name);
    if (it != ops_.end() && !it->second.empty()) {
      auto e = major == 0 ? std::prev(it->second.end()) : it->second.find(major);
      if (e != it->second.end()) {
        OpEntry* entry = e->second;
        bool domain_ok = name == raw_name ||
                         std::string(raw_name, name - 2 - raw_name) == (entry->def->domain ? entry->def->domain : "");
        if (domain_ok) {
          entry->count.fetch_add(1, std::memory_order_relaxed);
          *out = entry;
          return OPFORGE_OK;
        }
      }
    }
  }
  err = std::string("opforge-loader: no op ") + raw_name +
        (major ? " version " + std::to_string(major) : std::string()) + " is registered";
  return OPFORGE_ERR_NOT_FOUND;
}

}  // namespace opforge::loader
