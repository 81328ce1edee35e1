// C++ half of bench/loader_bench.py: cost of op lookup+acquire+release and of one checked call,
// and hot-reload latency while caller threads keep calling. Prints one JSON object.
#include <opforge/loader.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double ns_since(Clock::time_point t0) { return std::chrono::duration<double, std::nano>(Clock::now() - t0).count(); }

double acquire_release_ns(OpforgeRegistry* reg, int threads, long iters) {
  std::vector<std::thread> pool;
  std::atomic<int> ready{0};
  auto t0 = Clock::now();
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      ready++;
      while (ready.load() < threads) {}
      for (long i = 0; i < iters; ++i) {
        OpforgeOpRef* ref = nullptr;
        if (opforge_acquire(reg, "Scale", 0, &ref, nullptr, 0) == OPFORGE_OK) opforge_release(ref);
      }
    });
  for (auto& t : pool) t.join();
  return ns_since(t0) / double(iters);  // wall time per iteration of each thread
}

bool call_scale(OpforgeOpRef* ref, float* x, float* y, int64_t n) {
  void* inst = nullptr;
  OpforgeAttrValue scale{"scale", OPFORGE_ATTR_FLOAT, 2.0, 0, nullptr};
  if (opforge_op_create(ref, &scale, 1, &inst, nullptr, 0) != OPFORGE_OK) return false;
  int64_t shape[1] = {n};
  OpforgeTensor in{OPFORGE_DTYPE_FLOAT32, 1, shape, x}, out{OPFORGE_DTYPE_FLOAT32, 1, shape, y};
  OpforgeTensorDesc desc;
  bool ok = opforge_op_output_shapes(ref, inst, &in, 1, &desc, 1, nullptr, 0) == OPFORGE_OK &&
            opforge_op_compute(ref, inst, &in, 1, &out, 1, nullptr, 0) == OPFORGE_OK;
  opforge_op_destroy(ref, inst);
  return ok;
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(p * double(v.size())))];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) { std::fprintf(stderr, "usage: loader_bench LIB_A LIB_B (two files of one plugin)\n"); return 2; }
  OpforgeRegistry* reg = opforge_registry_create();
  char err[1024];
  if (opforge_registry_load(reg, argv[1], err, sizeof err) != OPFORGE_OK) { std::fprintf(stderr, "%s\n", err); return 1; }

  const long iters = 2000000;
  acquire_release_ns(reg, 1, iters / 10);  // warm up
  double acq1 = acquire_release_ns(reg, 1, iters);
  double acq2 = acquire_release_ns(reg, 2, iters / 2);

  float x[16] = {0}, y[16];
  OpforgeOpRef* ref = nullptr;
  opforge_acquire(reg, "Scale", 0, &ref, err, sizeof err);
  const long calls = 500000;
  auto t0 = Clock::now();
  for (long i = 0; i < calls; ++i) call_scale(ref, x, y, 16);
  double call_ns = ns_since(t0) / double(calls);
  opforge_release(ref);

  // Reload latency under load: 2 caller threads (the machine's cores) call the op continuously.
  std::atomic<bool> stop{false};
  std::atomic<long> done{0}, failed{0};
  std::atomic<double> worst_acquire_ns{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 2; ++t)
    callers.emplace_back([&] {
      float xs[16] = {0}, ys[16];
      double worst = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        OpforgeOpRef* r = nullptr;
        auto t = Clock::now();
        int32_t s = opforge_acquire(reg, "Scale", 0, &r, nullptr, 0);
        worst = std::max(worst, ns_since(t));
        if (s != OPFORGE_OK) { failed++; continue; }
        if (!call_scale(r, xs, ys, 16)) failed++;
        opforge_release(r);
        done++;
      }
      double seen = worst_acquire_ns.load();
      while (worst > seen && !worst_acquire_ns.compare_exchange_weak(seen, worst)) {}
    });
  std::vector<double> reload_us;
  for (int i = 0; i < 200; ++i) {
    auto t = Clock::now();
    if (opforge_registry_reload(reg, argv[1 + (i + 1) % 2], err, sizeof err) != OPFORGE_OK) { std::fprintf(stderr, "%s\n", err); return 1; }
    reload_us.push_back(ns_since(t) / 1000.0);
  }
  stop = true;
  for (auto& t : callers) t.join();
  opforge_registry_destroy(reg);

  std::printf("{\"acquire_release_ns_1thread\": %.1f, \"acquire_release_ns_2threads\": %.1f, \"checked_call_ns_16elems\": %.1f, "
              "\"reload_us_p50\": %.1f, \"reload_us_p90\": %.1f, \"reload_us_p99\": %.1f, \"reload_us_max\": %.1f, \"calls_during_reloads\": %ld, "
              "\"failed_calls_during_reloads\": %ld, \"caller_worst_acquire_us_during_reloads\": %.1f}\n",
              acq1, acq2, call_ns, percentile(reload_us, 0.5), percentile(reload_us, 0.9), percentile(reload_us, 0.99), percentile(reload_us, 1.0),
              done.load(), failed.load(), worst_acquire_ns.load() / 1000.0);
  return failed.load() == 0 ? 0 : 1;
}
