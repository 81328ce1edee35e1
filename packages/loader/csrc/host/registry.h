// The plugin registry: many readers (acquire, calls), rare writers (load, unload, reload).
#pragma once
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <pthread.h>

#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "image.h"
#include "manifest.h"
#include "opforge/loader.h"

namespace opforge::loader {

class Logger {
 public:
  void set(OpforgeLogFn fn, void* user);
  void log(int32_t level, const std::string& line);

 private:
  std::mutex mu_;
  OpforgeLogFn fn_ = nullptr;
  void* user_ = nullptr;
};

const char* state_name(int32_t state);

// A reader/writer lock that prefers writers. std::shared_mutex (glibc's default rwlock) prefers
// readers: with callers acquiring ops in a tight loop a reload waited up to tens of ms for a gap.
// Same interface as std::shared_mutex, so std::shared_lock / std::unique_lock work with it.
class WriterPreferringMutex {
 public:
  WriterPreferringMutex() {
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&lock_, &attr);
    pthread_rwlockattr_destroy(&attr);
  }
  ~WriterPreferringMutex() { pthread_rwlock_destroy(&lock_); }
  WriterPreferringMutex(const WriterPreferringMutex&) = delete;
  WriterPreferringMutex& operator=(const WriterPreferringMutex&) = delete;
  void lock() { pthread_rwlock_wrlock(&lock_); }
  void unlock() { pthread_rwlock_unlock(&lock_); }
  void lock_shared() { pthread_rwlock_rdlock(&lock_); }
  void unlock_shared() { pthread_rwlock_unlock(&lock_); }

 private:
  pthread_rwlock_t lock_;
};

// One mapping of a verified library image (image.h). Destroyed when the registry and every
// acquired op let go of it: the destructor runs the plugin's unload hook, then dlclose, then
// closes its $ORIGIN dependencies (deferred unload). `path` is the real file: every log line and
// message uses it.
struct Library {
  std::string name, version, kind, path, source_dir;
  std::string dlopen_path;  // a /proc/self/fd/N of image_fd: what dlopen and dladdr know it by
  int image_fd = -1;        // the verified bytes, until they are mapped (close_image)
  FileId library_id, manifest_id;
  void* handle = nullptr;
  std::vector<void*> dependencies;  // $ORIGIN dependencies (image.h), closed after the plugin
  const OpforgePlugin* plugin = nullptr;
  bool initialized = false;
  std::shared_ptr<Logger> log;
  void close_image();
  ~Library();
};

// A registered op; the OpforgeOpRef handed to callers is this object. `count` holds one
// reference for the registry while registered plus one per outstanding acquire.
struct OpEntry {
  std::shared_ptr<Library> lib;
  const OpforgeOpDef* def = nullptr;
  std::atomic<int64_t> count{1};
  std::atomic<int32_t> state{OPFORGE_STATE_LOADED};
  std::atomic<bool> registered{true};

  int64_t refs() const { return count.load() - (registered.load() ? 1 : 0); }
  void transition(int32_t to);
  void release();
};

class Registry {
 public:
  Registry();
  ~Registry();
  void set_log(OpforgeLogFn fn, void* user) { log_->set(fn, user); }
  void set_admit(OpforgeAdmitFn fn, void* user);
  // True while this thread is inside a load, unload, reload or sync of this registry: in a plugin
  // hook or a log / admit callback it runs under its writer lock.
  bool writing_on_this_thread() const;

  int32_t load(const std::string& path, std::string& err);
  int32_t load_dir(const std::string& dir, uint32_t* loaded, uint32_t* refused, std::string& err);
  int32_t unload(const std::string& plugin, std::string& err);
  int32_t reload(const std::string& path, std::string& err);
  int32_t sync_dir(const std::string& dir, uint32_t* changes, std::string& err);
  void enumerate(OpforgeOpVisitor fn, void* user);
  uint32_t plugin_count();
  int32_t acquire(const char* name, uint32_t major, OpEntry** out, std::string& err);

 private:
  struct Plugin {
    std::shared_ptr<Library> lib;
    std::vector<OpEntry*> entries;
  };
  enum class Mode { Load, Reload };
  // A load between its file checks and its dlopen: the verified image, waiting for admission.
  struct Pending {
    std::shared_ptr<Library> lib;  // owns the image's memfd until it is mapped
    Manifest manifest;
    Mode mode = Mode::Load;
    OriginDependencies deps;
    bool admitted = false;
    std::string refusal;  // why the admit callback refused it
  };
  class WriterLock;  // writer_, and the mark that this thread holds it (re-entry refusal)

  int32_t refuse_reentry(const char* call, std::string& err) const;
  void admit(std::vector<Pending>& batch);

  int32_t load_locked(const std::string& path, Mode mode, const std::string& source_dir, std::string& err);
  int32_t prepare(const std::string& path, Mode mode, const std::string& source_dir, Pending& out, std::string& err);
  int32_t check_registry_state(const Pending& p, std::string& err);
  int32_t map_library(Pending& p, std::string& err);
  int32_t finish(Pending& p, std::string& err);
  void load_batch(std::vector<Pending>& batch, uint32_t& ok, uint32_t& bad);
  void sync_batch(std::vector<Pending>& batch, std::vector<std::pair<std::string, std::pair<FileId, FileId>>>& scanned,
                  uint32_t& changed);
  int32_t unload_locked(const std::string& plugin, std::string& err);
  int32_t refuse(const std::string& path, const std::string& reason, int32_t status, std::string& err);
  std::string find_duplicate(const Manifest& m, const std::string& replacing);
  void retire(std::vector<OpEntry*>& entries);

  std::shared_ptr<Logger> log_;
  std::mutex writer_;               // one writer at a time (load / unload / reload / sync)
  mutable WriterPreferringMutex mu_;  // guards ops_ and plugins_
  std::unordered_map<std::string, std::map<uint32_t, OpEntry*>> ops_;
  std::map<std::string, Plugin> plugins_;
  std::map<std::string, std::pair<FileId, FileId>> reported_refusals_;  // sync: don't repeat
  std::mutex admit_mu_;  // guards the two below (set_admit may run while a load asks)
  OpforgeAdmitFn admit_fn_ = nullptr;
  void* admit_user_ = nullptr;
};

}  // namespace opforge::loader

struct OpforgeRegistry {
  opforge::loader::Registry impl;
};
