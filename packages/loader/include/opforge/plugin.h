/* opforge plugin SDK: the only header a third-party operator library needs.
 *
 * Pure C (C99 / C++ via extern "C"): no C++ types and no exceptions cross this boundary.
 * A plugin exports exactly one symbol, opforge_plugin_entry(), returning a pointer to a
 * static OpforgePlugin whose first field is api_version. Every call from the host into the
 * plugin returns an OpforgeStatus and writes a message into a caller-owned buffer.
 */
#ifndef OPFORGE_PLUGIN_H_
#define OPFORGE_PLUGIN_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped on any incompatible change of the structs below. The host accepts
 * [OPFORGE_PLUGIN_API_VERSION_MIN, OPFORGE_PLUGIN_API_VERSION]. */
#define OPFORGE_PLUGIN_API_VERSION 1
#define OPFORGE_PLUGIN_API_VERSION_MIN 1

#define OPFORGE_PLUGIN_ENTRY_SYMBOL "opforge_plugin_entry"
#define OPFORGE_MAX_RANK 8

#if defined(_WIN32)
#define OPFORGE_PLUGIN_EXPORT __declspec(dllexport)
#else
#define OPFORGE_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

typedef enum OpforgeStatus {
  OPFORGE_OK = 0,
  OPFORGE_ERR_INVALID_ARGUMENT = 1, /* bad input, shape, dtype or attribute */
  OPFORGE_ERR_UNSUPPORTED = 2,      /* valid request this plugin cannot serve */
  OPFORGE_ERR_OUT_OF_MEMORY = 3,
  OPFORGE_ERR_INTERNAL = 4,
  OPFORGE_ERR_NOT_FOUND = 5,        /* host: no such op / plugin */
  OPFORGE_ERR_REFUSED = 6,          /* host: plugin refused at load (message says why) */
  OPFORGE_ERR_INIT_FAILED = 7,      /* plugin init hook failed */
  OPFORGE_ERR_REENTRANT = 8         /* host: a registry call from inside that registry's own
                                       load / unload (see OpforgePlugin.init) */
} OpforgeStatus;

/* Element types use ONNX TensorProto codes, so engines can map them without a table. */
typedef enum OpforgeDType {
  OPFORGE_DTYPE_FLOAT32 = 1,
  OPFORGE_DTYPE_INT8 = 3,
  OPFORGE_DTYPE_INT32 = 6,
  OPFORGE_DTYPE_INT64 = 7,
  OPFORGE_DTYPE_FLOAT16 = 10,
  OPFORGE_DTYPE_FLOAT64 = 11,
  OPFORGE_DTYPE_BFLOAT16 = 16,
  OPFORGE_DTYPE_FLOAT8E4M3FN = 17 /* float8 e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa bits */
} OpforgeDType;

/* A dense, contiguous, row-major tensor in host memory. */
typedef struct OpforgeTensor {
  int32_t dtype;        /* OpforgeDType */
  int32_t rank;         /* 0..OPFORGE_MAX_RANK */
  const int64_t* shape; /* rank entries */
  void* data;           /* may be NULL when the tensor is empty */
} OpforgeTensor;

/* What an op promises about one output, filled by output_shapes. */
typedef struct OpforgeTensorDesc {
  int32_t dtype;
  int32_t rank;
  int64_t shape[OPFORGE_MAX_RANK];
} OpforgeTensorDesc;

typedef struct OpforgeIODesc {
  const char* name;
  uint32_t num_dtypes;
  const int32_t* dtypes; /* accepted OpforgeDType values */
} OpforgeIODesc;

typedef enum OpforgeAttrType {
  OPFORGE_ATTR_FLOAT = 1,
  OPFORGE_ATTR_INT = 2,
  OPFORGE_ATTR_STRING = 3
} OpforgeAttrType;

typedef struct OpforgeAttrSchema {
  const char* name;
  int32_t type;       /* OpforgeAttrType */
  int32_t required;   /* 0: the default below applies */
  double default_float;
  int64_t default_int;
  const char* default_string;
  const char* doc;
} OpforgeAttrSchema;

/* Attribute values passed to create(): the host resolves defaults, so the plugin always
 * receives every attribute of its schema, in schema order. */
typedef struct OpforgeAttrValue {
  const char* name;
  int32_t type;
  double f;
  int64_t i;
  const char* s;
} OpforgeAttrValue;

typedef struct OpforgeOpDef {
  const char* domain;
  const char* name;
  uint32_t version_major; /* a breaking change of the op bumps this */
  uint32_t version_minor;
  const char* description;
  uint32_t num_inputs;
  const OpforgeIODesc* inputs;
  uint32_t num_outputs;
  const OpforgeIODesc* outputs;
  uint32_t num_attrs;
  const OpforgeAttrSchema* attrs;

  /* An instance holds the validated attributes (and any per-instance state). */
  int32_t (*create)(const OpforgeAttrValue* attrs, uint32_t num_attrs, void** instance,
                    char* err, size_t err_len);
  void (*destroy)(void* instance);
  int32_t (*output_shapes)(void* instance, const OpforgeTensor* inputs, uint32_t num_inputs,
                           OpforgeTensorDesc* outputs, uint32_t num_outputs, char* err,
                           size_t err_len);
  /* Must be safe to call concurrently on distinct instances. */
  int32_t (*compute)(void* instance, const OpforgeTensor* inputs, uint32_t num_inputs,
                     OpforgeTensor* outputs, uint32_t num_outputs, char* err, size_t err_len);
} OpforgeOpDef;

typedef struct OpforgeHostInfo {
  uint32_t api_version;     /* the host's OPFORGE_PLUGIN_API_VERSION */
  const char* host_version; /* opforge-loader version, e.g. "0.1.0" */
} OpforgeHostInfo;

typedef struct OpforgePlugin {
  uint32_t api_version; /* must stay the first field: OPFORGE_PLUGIN_API_VERSION */
  uint32_t struct_size; /* sizeof(OpforgePlugin) as the plugin was built */
  const char* name;     /* matches the manifest's "name" */
  const char* version;  /* matches the manifest's "version" */
  uint32_t num_ops;
  const OpforgeOpDef* ops;
  /* Optional (NULL = nothing to do). init runs once after load, before any op is served;
   * keep it cheap and defer device work to create() (seed 000 section 5.4). unload runs once,
   * after the last reference is released, right before dlclose.
   *
   * Re-entry: init, and unload when it runs inside a load, unload, reload or sync, run while
   * the registry holds its writer lock. From there, opforge_registry_load, _load_dir, _unload,
   * _reload and _sync_dir of that same registry return OPFORGE_ERR_REENTRANT (the message
   * names the call and the hook) instead of waiting for the lock forever; the registry is left
   * as it was, and the outer load goes on with whatever init then returns. Acquiring ops and
   * calling them (opforge_acquire, opforge_op_*) works from both hooks. */
  int32_t (*init)(const OpforgeHostInfo* host, char* err, size_t err_len);
  void (*unload)(void);
} OpforgePlugin;

typedef const OpforgePlugin* (*OpforgePluginEntryFn)(void);

/* The one symbol a plugin defines and exports. */
OPFORGE_PLUGIN_EXPORT const OpforgePlugin* opforge_plugin_entry(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* OPFORGE_PLUGIN_H_ */
