/* Configurable test plugin: Y = X + helper_impl(), where helper_impl() returns OFFSET
 * (-DDEPENDENCY_OFFSET: Y = X + dependency_offset(), a function of a library it links).
 * Built by the tests with -D flags to produce good plugins, new versions and broken ones.
 * -DTRACE: appends "<event> <version> <offset> <mapping>" to the file $OPFORGE_TEST_TRACE for
 * ctor, init, unload and dtor (mapping: the address of this copy's statics), refuses a second
 * init on one mapping and fails compute outside init..unload, as a stateful plugin would.
 * -DHANG_IN_INIT / -DHANG_IN_COMPUTE: never returns from init / compute.
 * -DREENTER_IN_INIT / -DREENTER_IN_UNLOAD: the hook calls back into the registry loading it (see
 * reenter()); with -DREENTER_FAILS_INIT, init returns what that call returned.
 * -DFORK_IN_INIT / -DDAEMONIZE_IN_INIT: init leaves a process behind (a plain fork / a setsid
 * daemon after a double fork) that appends its pid to $OPFORGE_TEST_PIDS and waits forever.
 * -DFLOOD_MIB=N: init writes N MiB without a newline to stdout. */
#define _POSIX_C_SOURCE 200809L
#include <opforge/plugin.h>

#include <stdio.h>
#include <stdlib.h>

#ifndef PLUGIN_NAME
#define PLUGIN_NAME "test_offset"
#endif
#ifndef PLUGIN_VERSION
#define PLUGIN_VERSION "1.0.0"
#endif
#ifndef OP_NAME
#define OP_NAME "Offset"
#endif
#ifndef OFFSET
#define OFFSET 1.0f
#endif
#ifndef API_VERSION
#define API_VERSION OPFORGE_PLUGIN_API_VERSION
#endif
#ifndef ENTRY_NAME
#define ENTRY_NAME opforge_plugin_entry
#endif

#ifdef TRACE
#include <fcntl.h>
#include <unistd.h>

static int g_inits;     /* init calls on this mapping */
static int g_serving;   /* between init and unload */

static void trace(const char* event) {
  const char* path = getenv("OPFORGE_TEST_TRACE");
  if (!path) return;
  char line[200];
  int n = snprintf(line, sizeof line, "%s %s %g %p\n", event, PLUGIN_VERSION, (double)OFFSET, (void*)&g_inits);
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  if (write(fd, line, (size_t)n) != n) { /* the test sees the missing line */ }
  close(fd);
}

__attribute__((constructor)) static void on_map(void) { trace("ctor"); }
__attribute__((destructor)) static void on_unmap(void) { trace("dtor"); }
#endif

/* Deliberately global and equally named in every build (seed 000 section 5.2). */
float helper_impl(void) { return OFFSET; }

#if defined(HANG_IN_INIT) || defined(HANG_IN_COMPUTE)
#include <unistd.h>
static void hang(void) {
  for (;;) sleep(1000);
}
#endif

#if defined(FORK_IN_INIT) || defined(DAEMONIZE_IN_INIT)
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* Tells the process that started it (through ready) once its pid is written. */
static void linger(int ready) {
  const char* path = getenv("OPFORGE_TEST_PIDS");
  FILE* pids = path ? fopen(path, "a") : NULL;
  if (pids) {
    fprintf(pids, "%d\n", (int)getpid());
    fclose(pids);
  }
  if (write(ready, "x", 1) != 1) { /* init returns anyway: the test sees the missing pid */ }
  close(ready);
  for (;;) pause();
}

static void leave_a_process_behind(void) {
  int ready[2];
  if (pipe(ready) != 0) return;
  pid_t child = fork();
  if (child == 0) {
    close(ready[0]);
#ifdef DAEMONIZE_IN_INIT
    setsid();
    if (fork() != 0) _exit(0);
#endif
    linger(ready[1]);
  }
  close(ready[1]);
  char byte;
  if (read(ready[0], &byte, 1) != 1) { /* the child died before writing its pid */ }
  close(ready[0]);
#ifdef DAEMONIZE_IN_INIT
  if (child > 0) waitpid(child, NULL, 0); /* the middle process exited at once */
#endif
}
#endif

#ifdef FLOOD_MIB
#include <string.h>
#include <unistd.h>

static void flood_stdout(void) {
  static char chunk[1 << 20];
  memset(chunk, 'x', sizeof chunk);
  for (int i = 0; i < FLOOD_MIB; ++i)
    if (write(1, chunk, sizeof chunk) < 0) return;
}
#endif

#if defined(REENTER_IN_INIT) || defined(REENTER_IN_UNLOAD)
#include <dlfcn.h>
#include <string.h>

typedef int32_t (*RegistryCall)(void* reg, const char* arg, char* err, size_t len);

/* $OPFORGE_TEST_REENTER is "<host function> <argument>" (opforge_registry_load PATH, ..._unload
 * NAME), called on the registry whose address is $OPFORGE_TEST_REGISTRY; appends
 * "<function> <status> <message>" to $OPFORGE_TEST_TRACE and returns the status. */
static int32_t reenter(char* err, size_t len) {
  const char* registry = getenv("OPFORGE_TEST_REGISTRY");
  const char* request = getenv("OPFORGE_TEST_REENTER");
  const char* trace_path = getenv("OPFORGE_TEST_TRACE");
  const char* space = request ? strchr(request, ' ') : NULL;
  void* host = dlopen("libopforge_loader.so.1", RTLD_NOW | RTLD_NOLOAD);
  char function[64] = {0};
  if (!registry || !space || !trace_path || !host || (size_t)(space - request) >= sizeof function) {
    snprintf(err, len, "reenter: OPFORGE_TEST_REGISTRY, _REENTER, _TRACE or the loaded host missing");
    return OPFORGE_ERR_INTERNAL;
  }
  memcpy(function, request, (size_t)(space - request));
  RegistryCall call;
  *(void**)&call = dlsym(host, function);
  int32_t status = OPFORGE_ERR_NOT_FOUND;
  err[0] = '\0';
  if (call) status = call((void*)(uintptr_t)strtoull(registry, NULL, 16), space + 1, err, len);
  dlclose(host);
  FILE* trace_file = fopen(trace_path, "a");
  if (trace_file) {
    fprintf(trace_file, "%s %d %s\n", function, (int)status, err);
    fclose(trace_file);
  }
  return status;
}
#endif

#ifdef DEPENDENCY_OFFSET
/* The offset comes from a library the plugin is linked against (the tests put it next to the
 * plugin and let RUNPATH $ORIGIN find it). */
float dependency_offset(void);
#define OFFSET_OF_THIS_CALL dependency_offset()
#else
#define OFFSET_OF_THIS_CALL helper_impl()
#endif

static const int32_t kTypes[] = {OPFORGE_DTYPE_FLOAT32};
static const OpforgeIODesc kIn[] = {{"X", 1, kTypes}};
static const OpforgeIODesc kOut[] = {{"Y", 1, kTypes}};

static int64_t numel(const OpforgeTensor* t) {
  int64_t n = 1;
  for (int32_t i = 0; i < t->rank; ++i) n *= t->shape[i];
  return n;
}

static int32_t create(const OpforgeAttrValue* a, uint32_t n, void** inst, char* err, size_t len) {
  (void)a; (void)n; (void)err; (void)len;
  *inst = malloc(1);
  return *inst ? OPFORGE_OK : OPFORGE_ERR_OUT_OF_MEMORY;
}

static void destroy(void* inst) { free(inst); }

static int32_t shapes(void* inst, const OpforgeTensor* in, uint32_t ni, OpforgeTensorDesc* out, uint32_t no,
                      char* err, size_t len) {
  (void)inst; (void)ni; (void)no; (void)err; (void)len;
  out[0].dtype = in[0].dtype;
  out[0].rank = in[0].rank;
  for (int32_t i = 0; i < in[0].rank; ++i) out[0].shape[i] = in[0].shape[i];
  return OPFORGE_OK;
}

static int32_t compute(void* inst, const OpforgeTensor* in, uint32_t ni, OpforgeTensor* out, uint32_t no,
                       char* err, size_t len) {
  (void)inst; (void)ni; (void)no;
#ifdef HANG_IN_COMPUTE
  hang();
#endif
#ifdef TRACE
  if (!g_serving) {
    snprintf(err, len, "test." OP_NAME ": called while the plugin is not initialized");
    return OPFORGE_ERR_INTERNAL;
  }
#endif
  if (numel(&out[0]) != numel(&in[0])) {
    snprintf(err, len, "test." OP_NAME ": Y: expected %lld elements, got %lld", (long long)numel(&in[0]),
             (long long)numel(&out[0]));
    return OPFORGE_ERR_INVALID_ARGUMENT;
  }
  const float* x = (const float*)in[0].data;
  float* y = (float*)out[0].data;
  for (int64_t i = 0; i < numel(&in[0]); ++i) y[i] = x[i] + OFFSET_OF_THIS_CALL;
  return OPFORGE_OK;
}

static int32_t init(const OpforgeHostInfo* host, char* err, size_t len) {
  (void)host;
#ifdef TRACE
  trace("init");
  if (++g_inits > 1) {
    snprintf(err, len, "init called twice on one mapping");
    return OPFORGE_ERR_INTERNAL;
  }
  g_serving = 1;
#endif
#if defined(FORK_IN_INIT) || defined(DAEMONIZE_IN_INIT)
  leave_a_process_behind();
#endif
#ifdef FLOOD_MIB
  flood_stdout();
#endif
#ifdef CRASH_IN_INIT
  volatile int* p = NULL;
  *p = 1;
#endif
#ifdef HANG_IN_INIT
  hang();
#endif
#ifdef REENTER_IN_INIT
  int32_t reentered = reenter(err, len);
#ifdef REENTER_FAILS_INIT
  return reentered;
#endif
  (void)reentered;
#endif
#ifdef INIT_FAIL
  snprintf(err, len, "device not ready (test)");
  return OPFORGE_ERR_INTERNAL;
#else
  (void)err; (void)len;
  return OPFORGE_OK;
#endif
}

static void unload_hook(void) {
#ifdef REENTER_IN_UNLOAD
  char err[1024];
  reenter(err, sizeof err);
#endif
#ifdef TRACE
  trace("unload");
  g_serving = 0;
#endif
}

static const OpforgeOpDef kOps[] = {
    {"test", OP_NAME, 1, 0, "Y = X + offset", 1, kIn, 1, kOut, 0, NULL, create, destroy, shapes, compute},
};

static const OpforgePlugin kPlugin = {API_VERSION, sizeof(OpforgePlugin), PLUGIN_NAME, PLUGIN_VERSION, 1, kOps,
                                      init, unload_hook};

OPFORGE_PLUGIN_EXPORT const OpforgePlugin* ENTRY_NAME(void) {
  return &kPlugin;
}
