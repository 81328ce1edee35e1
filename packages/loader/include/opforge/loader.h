/* opforge host C API (libopforge_loader.so.1): load, register, reference-count and hot-reload
 * operator plugins described by <library>.manifest.json files. All functions are thread-safe.
 * Functions returning int32_t return an OpforgeStatus and fill err (may be NULL) on failure. */
#ifndef OPFORGE_LOADER_H_
#define OPFORGE_LOADER_H_

#include "opforge/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

#define OPFORGE_LOADER_API __attribute__((visibility("default")))

typedef struct OpforgeRegistry OpforgeRegistry;
typedef struct OpforgeOpRef OpforgeOpRef; /* an acquired op: keeps its library loaded */

typedef enum OpforgeOpState {
  OPFORGE_STATE_LOADED = 0,
  OPFORGE_STATE_REGISTERED = 1,
  OPFORGE_STATE_INITIALIZING = 2,
  OPFORGE_STATE_RUNNING = 3,
  OPFORGE_STATE_UNREGISTERING = 4
} OpforgeOpState;

enum { OPFORGE_LOG_DEBUG = 10, OPFORGE_LOG_INFO = 20, OPFORGE_LOG_WARNING = 30, OPFORGE_LOG_ERROR = 40 };

/* line is one structured record, e.g.
 * "opforge-loader state plugin=opforge_nn op=opforge::Swish@1 from=Initializing to=Running refs=0" */
typedef void (*OpforgeLogFn)(void* user, int32_t level, const char* line);

typedef struct OpforgeOpInfo {
  const char* plugin;      /* manifest name */
  const char* plugin_version;
  const char* library;     /* absolute path of the loaded file */
  const char* kind;        /* "opforge" */
  const char* domain;
  const char* name;
  uint32_t version_major;
  uint32_t version_minor;
  const char* description;
  int32_t state;           /* OpforgeOpState */
  int64_t refs;            /* outstanding acquired references */
  uint32_t num_inputs;
  uint32_t num_outputs;
  uint32_t num_attrs;
  const OpforgeOpDef* def;
} OpforgeOpInfo;

typedef void (*OpforgeOpVisitor)(void* user, const OpforgeOpInfo* info);

OPFORGE_LOADER_API const char* opforge_loader_version(void);
OPFORGE_LOADER_API uint32_t opforge_loader_api_version(void);

OPFORGE_LOADER_API OpforgeRegistry* opforge_registry_create(void);
/* Unregisters everything; libraries still referenced unload when their last ref drops. Called
 * from inside a hook or callback of this registry's own load or unload it does nothing. */
OPFORGE_LOADER_API void opforge_registry_destroy(OpforgeRegistry* reg);
/* fn == NULL restores the default (stderr when OPFORGE_LOADER_LOG is set, else silent). */
OPFORGE_LOADER_API void opforge_registry_set_log(OpforgeRegistry* reg, OpforgeLogFn fn, void* user);

/* Admission: asked before any code of a library runs, after its manifest, sha256, ELF header and
 * $ORIGIN dependencies are checked, before it or those dependencies are dlopen'ed (e.g. to run it
 * in a child process first, as the opforge-loader CLI does). load_dir and sync_dir ask about up
 * to OPFORGE_ADMIT_BATCH libraries in one call; load and reload about one. */
#define OPFORGE_ADMIT_BATCH 64
typedef struct OpforgeAdmission {
  const char* library_path;         /* the real file (for messages) */
  int image_fd;                     /* sealed memfd holding exactly the bytes hashed and later mapped:
                                       admit THESE bytes (dlopen /proc/self/fd/N in a process that
                                       inherits it), never the path, which may have been replaced;
                                       open for the duration of the call only */
  uint32_t num_dependencies;        /* $ORIGIN dependencies the host dlopens first, in this order */
  const char* const* dependencies;  /* their paths */
  int32_t status;                   /* set by the callback: OPFORGE_OK admits; it starts as
                                       OPFORGE_ERR_REFUSED, so an entry left alone is refused */
  char* err;                        /* the reason of a refusal, written by the callback */
  size_t err_len;
} OpforgeAdmission;
/* Runs under the writer lock, like the plugin hooks (plugin.h: re-entry). */
typedef void (*OpforgeAdmitFn)(void* user, OpforgeAdmission* batch, uint32_t count);
/* fn == NULL admits every library (the default). */
OPFORGE_LOADER_API void opforge_registry_set_admit(OpforgeRegistry* reg, OpforgeAdmitFn fn, void* user);

/* Load one library (its manifest sits beside it as <file>.manifest.json). */
OPFORGE_LOADER_API int32_t opforge_registry_load(OpforgeRegistry* reg, const char* library_path,
                                                 char* err, size_t err_len);
/* Sorted recursive scan; loads every kind=opforge plugin. Refusals are logged and counted;
 * loaded/refused receive counts (may be NULL). Returns OPFORGE_OK unless dir is unusable. */
OPFORGE_LOADER_API int32_t opforge_registry_load_dir(OpforgeRegistry* reg, const char* dir,
                                                     uint32_t* loaded, uint32_t* refused,
                                                     char* err, size_t err_len);
OPFORGE_LOADER_API int32_t opforge_registry_unload(OpforgeRegistry* reg, const char* plugin_name,
                                                   char* err, size_t err_len);
/* Hot reload: load library_path (a plugin of the same manifest name), swap its ops in while
 * callers keep running; the old library unloads when its references drain. */
OPFORGE_LOADER_API int32_t opforge_registry_reload(OpforgeRegistry* reg, const char* library_path,
                                                   char* err, size_t err_len);
/* One watch step: load new plugins under dir, reload changed ones (inode, size, mtime of the
 * library or its manifest), unload those whose files disappeared. changes may be NULL. */
OPFORGE_LOADER_API int32_t opforge_registry_sync_dir(OpforgeRegistry* reg, const char* dir,
                                                     uint32_t* changes, char* err, size_t err_len);
OPFORGE_LOADER_API void opforge_registry_enumerate(OpforgeRegistry* reg, OpforgeOpVisitor fn,
                                                   void* user);
OPFORGE_LOADER_API uint32_t opforge_registry_plugin_count(OpforgeRegistry* reg);

/* version_major 0 = the highest registered major. */
OPFORGE_LOADER_API int32_t opforge_acquire(OpforgeRegistry* reg, const char* op_name,
                                           uint32_t version_major, OpforgeOpRef** out,
                                           char* err, size_t err_len);
OPFORGE_LOADER_API void opforge_release(OpforgeOpRef* ref);
OPFORGE_LOADER_API const OpforgeOpDef* opforge_ref_def(const OpforgeOpRef* ref);
OPFORGE_LOADER_API const char* opforge_ref_plugin_version(const OpforgeOpRef* ref);

/* Checked calls through an acquired op: the host validates names, counts, dtypes, ranks and
 * attributes against the op's schema before calling into the plugin. attrs may name a subset
 * of the schema (defaults fill the rest). */
OPFORGE_LOADER_API int32_t opforge_op_create(const OpforgeOpRef* ref, const OpforgeAttrValue* attrs,
                                             uint32_t num_attrs, void** instance, char* err,
                                             size_t err_len);
OPFORGE_LOADER_API void opforge_op_destroy(const OpforgeOpRef* ref, void* instance);
OPFORGE_LOADER_API int32_t opforge_op_output_shapes(const OpforgeOpRef* ref, void* instance,
                                                    const OpforgeTensor* inputs, uint32_t num_inputs,
                                                    OpforgeTensorDesc* outputs, uint32_t num_outputs,
                                                    char* err, size_t err_len);
OPFORGE_LOADER_API int32_t opforge_op_compute(const OpforgeOpRef* ref, void* instance,
                                              const OpforgeTensor* inputs, uint32_t num_inputs,
                                              OpforgeTensor* outputs, uint32_t num_outputs,
                                              char* err, size_t err_len);

/* Validate a manifest without loading anything: schema, sha256 of the library, permissions;
 * for kind "opforge" also the api range and this host's version against the sdk range; for
 * other kinds the sdk range against runtime_version when it is not NULL. */
OPFORGE_LOADER_API int32_t opforge_manifest_check(const char* manifest_path,
                                                  const char* runtime_version, char* err,
                                                  size_t err_len);

#ifdef __cplusplus
}
#endif

#endif /* OPFORGE_LOADER_H_ */
