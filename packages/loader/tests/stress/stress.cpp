// Stress for the host C API, built by test_stress.py with -fsanitize=thread and =address:
// N threads acquire and call an op in a loop while the main thread reloads and unloads its
// plugin. Every call made on a held reference must succeed with that version's result; every
// library loaded must be dlclosed by the end (the leak check of LeakSanitizer covers the rest).
#include <opforge/loader.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

std::atomic<long> g_running_lines{0}, g_dlclose_lines{0};

void count_log(void*, int32_t, const char* line) {
  if (std::strstr(line, " to=Running ")) g_running_lines++;
  if (std::strncmp(line, "opforge-loader dlclose", 22) == 0) g_dlclose_lines++;
}

struct Counters {
  std::atomic<long> calls{0}, not_found{0}, failed_with_ref{0};
};

bool call_once(OpforgeOpRef* ref, std::string& why) {
  char err[512] = {0};
  void* inst = nullptr;
  if (opforge_op_create(ref, nullptr, 0, &inst, err, sizeof err) != OPFORGE_OK) { why = err; return false; }
  float x[16], y[16];
  for (int i = 0; i < 16; ++i) x[i] = float(i);
  int64_t shape[1] = {16};
  OpforgeTensor in{OPFORGE_DTYPE_FLOAT32, 1, shape, x};
  OpforgeTensorDesc desc;
  OpforgeTensor out{OPFORGE_DTYPE_FLOAT32, 1, shape, y};
  bool ok = opforge_op_output_shapes(ref, inst, &in, 1, &desc, 1, err, sizeof err) == OPFORGE_OK &&
            opforge_op_compute(ref, inst, &in, 1, &out, 1, err, sizeof err) == OPFORGE_OK;
  opforge_op_destroy(ref, inst);
  if (!ok) { why = err; return false; }
  // versions are 1.0.<offset>: the result must match the version this reference holds
  const char* version = opforge_ref_plugin_version(ref);
  float offset = float(std::atoi(std::strrchr(version, '.') + 1));
  for (int i = 0; i < 16; ++i)
    if (y[i] != x[i] + offset) { why = std::string("wrong result for version ") + version; return false; }
  return true;
}

void worker(OpforgeRegistry* reg, const std::atomic<bool>* stop, Counters* c) {
  while (!stop->load(std::memory_order_relaxed)) {
    OpforgeOpRef* ref = nullptr;
    char err[256];
    if (opforge_acquire(reg, "Offset", 0, &ref, err, sizeof err) != OPFORGE_OK) { c->not_found++; continue; }
    std::string why;
    if (!call_once(ref, why)) {
      if (c->failed_with_ref++ < 5) std::fprintf(stderr, "FAILED call holding a reference: %s\n", why.c_str());
    }
    c->calls++;
    opforge_release(ref);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) { std::fprintf(stderr, "usage: stress LIB_V1 LIB_V2 CYCLES THREADS\n"); return 2; }
  const char* libs[2] = {argv[1], argv[2]};
  const int cycles = std::atoi(argv[3]), threads = std::atoi(argv[4]);
  OpforgeRegistry* reg = opforge_registry_create();
  opforge_registry_set_log(reg, count_log, nullptr);
  char err[1024];
  if (opforge_registry_load(reg, libs[0], err, sizeof err) != OPFORGE_OK) { std::fprintf(stderr, "%s\n", err); return 3; }
  long created = 1, writer_ops = 0, writer_errors = 0;

  Counters c;
  std::atomic<bool> stop{false};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(worker, reg, &stop, &c);
  for (int i = 0; i < cycles; ++i) {
    while (c.calls.load() < 4L * i) std::this_thread::yield();  // keep callers and writer interleaved
    int32_t s;
    if (i % 5 == 4) {
      s = opforge_registry_unload(reg, "stress", err, sizeof err);
      if (s == OPFORGE_OK) s = opforge_registry_load(reg, libs[i % 2], err, sizeof err);
    } else {
      s = opforge_registry_reload(reg, libs[(i + 1) % 2], err, sizeof err);
    }
    if (s == OPFORGE_OK) { ++created; } else { ++writer_errors; std::fprintf(stderr, "writer: %s\n", err); }
    ++writer_ops;
  }
  stop = true;
  for (auto& t : pool) t.join();
  opforge_registry_destroy(reg);

  std::printf("{\"calls\": %ld, \"not_found\": %ld, \"failed_with_ref\": %ld, \"writer_ops\": %ld, \"writer_errors\": %ld, "
              "\"libraries_loaded\": %ld, \"running_lines\": %ld, \"dlclose_lines\": %ld}\n",
              c.calls.load(), c.not_found.load(), c.failed_with_ref.load(), writer_ops, writer_errors, created,
              g_running_lines.load(), g_dlclose_lines.load());
  bool ok = c.failed_with_ref == 0 && writer_errors == 0 && g_dlclose_lines == created && c.calls > cycles;
  return ok ? 0 : 1;
}
