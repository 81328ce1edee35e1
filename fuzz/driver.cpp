// A small coverage-guided fuzzing engine for g++ (clang's libFuzzer is not available here).
//
// Links with a target defining the libFuzzer entry point LLVMFuzzerTestOneInput, so the same
// targets also build with clang -fsanitize=fuzzer. The target is compiled with
// -fsanitize=address,undefined -fsanitize-coverage=trace-pc,trace-cmp; this file is compiled
// with the sanitizers but WITHOUT coverage (its own code must not count as the target's).
//
//   driver [-flag=value ...] OUT_DIR [SEED_DIR ...]   replay the dirs, then fuzz; new inputs
//                                                      that reach new coverage go to OUT_DIR
//   driver [-flag=value ...] FILE ...                  replay just these inputs
//
// Flags (libFuzzer's names): -runs -max_total_time -max_len -timeout -seed -artifact_prefix
// -rss_limit_mb -print_final_stats, and -use_coverage=0 (blind mutation) / -use_cmp=0.
// Output follows libFuzzer's format (`#N NEW cov: .. ft: .. corp: ..`, `stat::...`,
// `Test unit written to PATH`) so one parser reads both engines.
#include <dirent.h>
#include <fcntl.h>
#include <sanitizer/common_interface_defs.h>
#include <sanitizer/lsan_interface.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);
// In the sanitizer runtimes, but not declared by GCC 12's headers.
extern "C" int __sanitizer_install_malloc_and_free_hooks(
    void (*on_malloc)(const volatile void*, size_t), void (*on_free)(const volatile void*));

// Sanitizer defaults: every report ends in abort(), which the SIGABRT handler below turns into a
// saved input (UBSan's runtime does not call the death callback). A smaller quarantine: it counts
// requested bytes, and millions of small freed inputs would otherwise hold gigabytes.
// The environment (ASAN_OPTIONS, UBSAN_OPTIONS) overrides these.
extern "C" const char* __asan_default_options() {
  return "abort_on_error=1:allocator_may_return_null=0:max_allocation_size_mb=2048:"
         "detect_leaks=1:quarantine_size_mb=16";
}
extern "C" const char* __ubsan_default_options() {
  return "abort_on_error=1:halt_on_error=1:print_stacktrace=1";
}

namespace {

using Bytes = std::vector<uint8_t>;

// ---------------------------------------------------------------- coverage and comparisons
constexpr size_t kMapSize = 1 << 16;
uint8_t g_edges[kMapSize];      // hit counts of (previous block, block) pairs for one input
uint8_t g_seen[kMapSize];       // per edge: the hit-count buckets any input has reached
uintptr_t g_prev_block;

struct CmpPair { uint8_t a[32], b[32]; uint8_t size; };
constexpr size_t kCmpSlots = 64;  // small: a random pick should hit a live slot
CmpPair g_cmps[kCmpSlots];      // operands of recent comparisons, one slot per comparison site
bool g_record_cmps = true;

volatile sig_atomic_t g_running;  // an input is executing (only its comparisons are recorded)

// The hooks call only functions of this file: a shared inline such as std::min is one COMDAT
// copy for the whole program, and at -O0 (not inlined) the linker may keep the target's
// instrumented copy, whose comparison calls the hook again (endless recursion).
inline size_t smaller(size_t a, size_t b) { return a < b ? a : b; }

// Byte loops, not memcmp/memcpy: the sanitizers' memcmp interceptor calls back into the hooks.
__attribute__((no_sanitize("address", "undefined"))) inline void record_cmp(
    uintptr_t pc, const void* a, const void* b, size_t size) {
  if (!g_running || !g_record_cmps || size == 0) return;
  const uint8_t* x = static_cast<const uint8_t*>(a);
  const uint8_t* y = static_cast<const uint8_t*>(b);
  CmpPair& slot = g_cmps[(pc ^ (pc >> 12)) % kCmpSlots];
  size = smaller(size, sizeof slot.a);
  bool equal = true;
  for (size_t i = 0; i < size; i++) equal &= x[i] == y[i];
  if (equal) return;
  for (size_t i = 0; i < size; i++) slot.a[i] = x[i], slot.b[i] = y[i];
  slot.size = static_cast<uint8_t>(size);
}

}  // namespace

#define PC reinterpret_cast<uintptr_t>(__builtin_return_address(0))
#define CMP_HOOK(name, type) \
  extern "C" void name(type a, type b) { record_cmp(PC, &a, &b, sizeof(type)); }

// Addresses relative to the target's entry point: the same across runs despite ASLR, so that a
// run with a fixed -seed is reproducible.
static uintptr_t g_pc_base;

extern "C" __attribute__((no_sanitize("address", "undefined"))) void __sanitizer_cov_trace_pc() {
  uintptr_t block = (PC - g_pc_base) * 0x9E3779B97F4A7C15ull >> 48;  // spread over the map
  g_edges[(block ^ g_prev_block) % kMapSize]++;
  g_prev_block = block >> 1;  // shifted: A->B and B->A are different edges
}
CMP_HOOK(__sanitizer_cov_trace_cmp1, uint8_t)
CMP_HOOK(__sanitizer_cov_trace_cmp2, uint16_t)
CMP_HOOK(__sanitizer_cov_trace_cmp4, uint32_t)
CMP_HOOK(__sanitizer_cov_trace_cmp8, uint64_t)
CMP_HOOK(__sanitizer_cov_trace_const_cmp1, uint8_t)
CMP_HOOK(__sanitizer_cov_trace_const_cmp2, uint16_t)
CMP_HOOK(__sanitizer_cov_trace_const_cmp4, uint32_t)
CMP_HOOK(__sanitizer_cov_trace_const_cmp8, uint64_t)
extern "C" void __sanitizer_cov_trace_cmpf(float, float) {}
extern "C" void __sanitizer_cov_trace_cmpd(double, double) {}
// cases = {count, bit width, case values...}: one case per call, in turn, so that a large switch
// does not take over the comparison table.
extern "C" void __sanitizer_cov_trace_switch(uint64_t value, uint64_t* cases) {
  static uint64_t turn;
  if (cases[0]) record_cmp(PC, &value, &cases[2 + turn++ % cases[0]], cases[1] / 8);
}
// Called by the sanitizers' interceptors of memcmp/strncmp/strcmp (multi-byte magic values).
extern "C" void __sanitizer_weak_hook_memcmp(void* pc, const void* a, const void* b, size_t n,
                                             int) {
  record_cmp(reinterpret_cast<uintptr_t>(pc), a, b, n);
}
extern "C" void __sanitizer_weak_hook_strncmp(void* pc, const char* a, const char* b, size_t n,
                                              int) {
  if (g_running) {
    record_cmp(reinterpret_cast<uintptr_t>(pc), a, b, smaller(strnlen(a, n), strnlen(b, n)));
  }
}
extern "C" void __sanitizer_weak_hook_strcmp(void* pc, const char* a, const char* b, int) {
  if (g_running) record_cmp(reinterpret_cast<uintptr_t>(pc), a, b, smaller(strlen(a), strlen(b)));
}

namespace {

uint8_t bucket(uint8_t hits) {  // AFL's hit-count classes: a loop running longer is new coverage
  if (hits <= 3) return hits == 3 ? 4 : hits;
  if (hits < 8) return 8;
  if (hits < 16) return 16;
  if (hits < 32) return 32;
  return hits < 128 ? 64 : 128;
}

size_t g_edges_seen, g_features;

__attribute__((no_sanitize("address", "undefined"))) bool merge_new_coverage() {
  bool fresh = false;
  const uint64_t* words = reinterpret_cast<const uint64_t*>(g_edges);
  for (size_t w = 0; w < kMapSize / 8; w++) {
    if (!words[w]) continue;
    for (size_t i = w * 8; i < w * 8 + 8; i++) {
      uint8_t bit = g_edges[i] ? bucket(g_edges[i]) : 0;
      if (!bit || (g_seen[i] & bit)) continue;
      g_edges_seen += g_seen[i] == 0;
      g_seen[i] |= bit;
      g_features++;
      fresh = true;
    }
  }
  return fresh;
}

// ---------------------------------------------------------------- options
struct Options {
  long runs = -1, max_total_time = 0, timeout = 10, rss_limit_mb = 2048, verbosity = 1;
  size_t max_len = 4096;
  uint64_t seed = 0;
  bool use_coverage = true, use_cmp = true, print_final_stats = true;
  std::string artifact_prefix = "./";
};

bool parse_flag(const char* arg, Options& o) {
  char name[64];
  const char* eq = strchr(arg, '=');
  if (arg[0] != '-' || !eq || eq - arg - 1 >= static_cast<long>(sizeof name)) return false;
  snprintf(name, sizeof name, "%.*s", static_cast<int>(eq - arg - 1), arg + 1);
  std::string value = eq + 1;
  long n = atol(value.c_str());
  if (!strcmp(name, "runs")) o.runs = n;
  else if (!strcmp(name, "max_total_time")) o.max_total_time = n;
  else if (!strcmp(name, "timeout")) o.timeout = n;
  else if (!strcmp(name, "rss_limit_mb")) o.rss_limit_mb = n;
  else if (!strcmp(name, "verbosity")) o.verbosity = n;
  else if (!strcmp(name, "max_len")) o.max_len = static_cast<size_t>(std::max(1L, n));
  else if (!strcmp(name, "seed")) o.seed = strtoull(value.c_str(), nullptr, 10);
  else if (!strcmp(name, "use_coverage")) o.use_coverage = n != 0;
  else if (!strcmp(name, "use_cmp")) o.use_cmp = n != 0;
  else if (!strcmp(name, "print_final_stats")) o.print_final_stats = n != 0;
  else if (!strcmp(name, "artifact_prefix")) o.artifact_prefix = value;
  else fprintf(stderr, "INFO: ignoring unknown flag %s\n", arg);
  return true;
}

// ---------------------------------------------------------------- running one input, crashes
Options g_opt;
const uint8_t* volatile g_input;  // the input being run (the target gets a private copy)
volatile size_t g_input_size;
volatile sig_atomic_t g_ticks_in_input, g_saved, g_stop;
volatile long g_mallocs, g_frees;
bool g_replay_only;

uint64_t fnv1a(const uint8_t* data, size_t size) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < size; i++) h = (h ^ data[i]) * 1099511628211ull;
  return h;
}

// Runs in signal handlers and the sanitizers' death path: only open/write/close after snprintf.
void save_input(const char* kind) {
  if (g_saved || !g_running) return;
  g_saved = 1;
  if (g_replay_only) return;  // the input is already a file
  char path[4096];
  snprintf(path, sizeof path, "%s%s-%016llx", g_opt.artifact_prefix.c_str(), kind,
           static_cast<unsigned long long>(fnv1a(g_input, g_input_size)));
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0 || write(fd, g_input, g_input_size) != static_cast<ssize_t>(g_input_size)) {
    dprintf(2, "==%d== ERROR: cannot write %s\n", getpid(), path);
  } else {
    dprintf(2, "artifact_prefix='%s'; Test unit written to %s\n",
            g_opt.artifact_prefix.c_str(), path);
  }
  if (fd >= 0) close(fd);
}

void on_death() { save_input("crash"); }

void on_deadly_signal(int sig) {
  if (g_running) dprintf(2, "==%d== ERROR: deadly signal %d (%s)\n", getpid(), sig, strsignal(sig));
  save_input("crash");
  _exit(77);
}

size_t peak_rss_mb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<size_t>(usage.ru_maxrss) / 1024;
}

void on_tick(int) {  // SIGALRM, once a second: per-input timeout and memory limit
  if (g_running && ++g_ticks_in_input > g_opt.timeout) {
    dprintf(2, "==%d== ERROR: timeout: one input ran more than %ld s\n", getpid(), g_opt.timeout);
    save_input("timeout");
    _exit(70);
  }
  if (g_running && peak_rss_mb() > static_cast<size_t>(g_opt.rss_limit_mb)) {
    dprintf(2, "==%d== ERROR: out of memory: rss above %ld MB\n", getpid(), g_opt.rss_limit_mb);
    save_input("oom");
    _exit(71);
  }
}

void on_stop(int) { g_stop = 1; }

void install_handlers() {
  __sanitizer_set_death_callback(on_death);
  struct sigaction action {};
  action.sa_flags = SA_RESTART;
  action.sa_handler = on_deadly_signal;
  for (int sig : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL}) {
    struct sigaction current {};
    sigaction(sig, nullptr, &current);
    if (current.sa_handler == SIG_DFL) sigaction(sig, &action, nullptr);  // else ASan reports it
  }
  action.sa_handler = on_tick;
  sigaction(SIGALRM, &action, nullptr);
  action.sa_handler = on_stop;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  itimerval every_second{{1, 0}, {1, 0}};
  setitimer(ITIMER_REAL, &every_second, nullptr);
}

void count_malloc(const volatile void*, size_t) { if (g_running) g_mallocs = g_mallocs + 1; }
void count_free(const volatile void*) { if (g_running) g_frees = g_frees + 1; }

__attribute__((noinline)) void clear_stack() {  // so stale pointers do not hide a leak
  volatile char scratch[8192];
  memset(const_cast<char*>(scratch), 0, sizeof scratch);
}

size_t g_execs;

// Runs one input; true when it reached coverage no earlier input reached.
bool execute(const Bytes& input) {
  memset(g_edges, 0, sizeof g_edges);
  g_prev_block = 0;
  // An exactly sized private copy: ASan sees any read past the end, and the target cannot
  // change the bytes that would be saved after a crash.
  uint8_t* copy = new uint8_t[input.size() + !input.size()];
  if (!input.empty()) memcpy(copy, input.data(), input.size());
  g_input = input.data();
  g_input_size = input.size();
  g_mallocs = g_frees = g_ticks_in_input = 0;
  g_running = 1;
  LLVMFuzzerTestOneInput(copy, input.size());
  bool allocated_more = g_mallocs > g_frees;
  if (allocated_more) clear_stack();
  if (allocated_more && __lsan_do_recoverable_leak_check()) {
    dprintf(2, "==%d== ERROR: the input leaked memory (report above)\n", getpid());
    save_input("leak");
    _exit(77);
  }
  g_running = 0;
  delete[] copy;
  g_execs++;
  return merge_new_coverage();
}

// ---------------------------------------------------------------- corpus, dictionary, mutation
struct Rng {
  uint64_t state;
  uint64_t next() {  // xorshift64*
    state ^= state >> 12, state ^= state << 25, state ^= state >> 27;
    return state * 2685821657736338717ull;
  }
  size_t below(size_t n) { return n ? next() % n : 0; }
};

std::vector<Bytes> g_corpus;
std::vector<Bytes> g_dict;  // tokens taken from the seed corpus: words and quoted strings
size_t g_corpus_bytes;
Rng g_rng{1};

void add_tokens(const Bytes& seed) {
  std::set<Bytes> tokens(g_dict.begin(), g_dict.end());
  for (size_t i = 0; i < seed.size() && tokens.size() < 1024;) {
    size_t end = i;
    if (seed[i] == '"') {
      while (++end < seed.size() && seed[end] != '"' && end - i < 48) {}
      end += end < seed.size() && seed[end] == '"';
    } else {
      while (end < seed.size() && (isalnum(seed[end]) || seed[end] == '_')) end++;
    }
    if (end - i >= 2 && end - i <= 48) tokens.insert(Bytes(seed.begin() + i, seed.begin() + end));
    i = std::max(end, i + 1);
  }
  g_dict.assign(tokens.begin(), tokens.end());
}

const int64_t kInteresting[] = {0, 1, -1, 2, 16, 32, 64, 100, 127, -128, 128, 255, 256, 1000,
                                1024, 4096, 32767, -32768, 65535, 65536, 2147483647,
                                -2147483647 - 1, 4294967295ll, INT64_MAX, INT64_MIN};
const char* const kNumbers[] = {"0", "-0", "1", "-1", "00", "0.5", "1e39", "-1e39", "1e309",
                                "1e-46", "3.4028235e38", "4294967296", "9223372036854775808",
                                "-9223372036854775809", "99999999999999999999999", "NaN", "inf"};

void overwrite(Bytes& d, size_t at, const uint8_t* src, size_t n) {
  if (d.size() < at + n) d.resize(at + n);
  std::copy(src, src + n, d.begin() + static_cast<long>(at));
}

void insert(Bytes& d, size_t at, const uint8_t* src, size_t n) {
  d.insert(d.begin() + static_cast<long>(at), src, src + n);
}

// Puts `token` into d, in place of existing bytes or inserted, at a random position.
void put_token(Bytes& d, const uint8_t* token, size_t n) {
  size_t at = g_rng.below(d.size() + 1);
  if (g_rng.below(2)) insert(d, at, token, n);
  else overwrite(d, std::min(at, d.size() - std::min(n, d.size())), token, n);
}

// Replaces one operand of a recorded comparison with the other where it occurs in d.
void use_comparison(Bytes& d) {
  const CmpPair& pair = g_cmps[g_rng.below(kCmpSlots)];
  if (!pair.size) return;
  bool swap = g_rng.below(2);
  const uint8_t* from = swap ? pair.b : pair.a;
  const uint8_t* to = swap ? pair.a : pair.b;
  auto found = std::search(d.begin(), d.end(), from, from + pair.size);
  if (found != d.end()) overwrite(d, static_cast<size_t>(found - d.begin()), to, pair.size);
  else put_token(d, to, pair.size);
}

void mutate_once(Bytes& d) {
  size_t at = g_rng.below(d.size());
  size_t span = 1 + g_rng.below(std::min<size_t>(d.size(), 32) + 1);
  switch (g_rng.below(11)) {
    case 0: if (!d.empty()) d[at] ^= static_cast<uint8_t>(1u << g_rng.below(8)); break;
    case 1: if (!d.empty()) d[at] = static_cast<uint8_t>(g_rng.next()); break;
    case 2: {  // insert a few random bytes, or one byte repeated
      Bytes chunk(1 + g_rng.below(8), static_cast<uint8_t>(g_rng.next()));
      if (g_rng.below(2)) for (auto& b : chunk) b = static_cast<uint8_t>(g_rng.next());
      insert(d, g_rng.below(d.size() + 1), chunk.data(), chunk.size());
      break;
    }
    case 3: d.erase(d.begin() + static_cast<long>(at),
                    d.begin() + static_cast<long>(std::min(d.size(), at + span))); break;
    case 4: if (!d.empty()) {  // duplicate or copy a range of d within d
      Bytes range(d.begin() + static_cast<long>(at),
                  d.begin() + static_cast<long>(std::min(d.size(), at + span)));
      if (g_rng.below(2)) insert(d, g_rng.below(d.size() + 1), range.data(), range.size());
      else overwrite(d, g_rng.below(d.size()), range.data(), range.size());
    } break;
    case 5: {  // an interesting integer, 1/2/4/8 bytes, either byte order
      int64_t v = kInteresting[g_rng.below(std::size(kInteresting))];
      size_t width = size_t{1} << g_rng.below(4);
      uint8_t bytes[8];
      for (size_t i = 0; i < width; i++) bytes[i] = static_cast<uint8_t>(v >> (8 * i));
      if (g_rng.below(2)) std::reverse(bytes, bytes + width);
      overwrite(d, std::min(at, d.size() - std::min(width, d.size())), bytes, width);
      break;
    }
    case 6: if (!d.empty()) {  // add or subtract a small number
      unsigned delta = 1 + static_cast<unsigned>(g_rng.below(35));
      d[at] = static_cast<uint8_t>(g_rng.below(2) ? d[at] + delta : d[at] - delta);
    } break;
    case 7: {  // splice: this input's head with another corpus entry's tail, or a chunk of it
      const Bytes& other = g_corpus[g_rng.below(g_corpus.size())];
      if (other.empty()) break;
      size_t from = g_rng.below(other.size());
      if (g_rng.below(2)) {
        d.resize(std::min(d.size(), at));
        d.insert(d.end(), other.begin() + static_cast<long>(from), other.end());
      } else {
        size_t n = std::min(other.size() - from, span);
        insert(d, g_rng.below(d.size() + 1), other.data() + from, n);
      }
      break;
    }
    case 8: if (!g_dict.empty()) {
      const Bytes& token = g_dict[g_rng.below(g_dict.size())];
      put_token(d, token.data(), token.size());
    } break;
    case 9: if (g_opt.use_cmp) use_comparison(d); break;
    default: {  // a textual number at the edges of the integer and float32/64 ranges
      const char* number = kNumbers[g_rng.below(std::size(kNumbers))];
      put_token(d, reinterpret_cast<const uint8_t*>(number), strlen(number));
    }
  }
}

Bytes mutate(const Bytes& base) {
  Bytes d = base;
  for (size_t n = 1 + g_rng.below(1u << g_rng.below(4)); n--;) mutate_once(d);
  if (d.size() > g_opt.max_len) d.resize(g_opt.max_len);
  return d;
}

// ---------------------------------------------------------------- files and progress
bool read_file(const std::string& path, Bytes& out) {
  std::ifstream in(path, std::ios::binary);
  out.assign(std::istreambuf_iterator<char>(in), {});
  return static_cast<bool>(in) || in.eof();
}

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> files;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* entry = readdir(d)) {
      std::string path = dir + "/" + entry->d_name;
      struct stat st {};
      if (stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) files.push_back(path);
    }
    closedir(d);
  }
  std::sort(files.begin(), files.end());
  return files;
}

void write_to_dir(const std::string& dir, const Bytes& input) {
  char name[32];
  snprintf(name, sizeof name, "/%016llx",
           static_cast<unsigned long long>(fnv1a(input.data(), input.size())));
  std::ofstream(dir + name, std::ios::binary)
      .write(reinterpret_cast<const char*>(input.data()), static_cast<long>(input.size()));
}

std::chrono::steady_clock::time_point g_start;

double seconds_since_start() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - g_start).count();
}

void progress(const char* event) {
  double s = seconds_since_start();
  fprintf(stderr, "#%zu\t%s cov: %zu ft: %zu corp: %zu/%zub exec/s: %.0f rss: %zuMb\n", g_execs,
          event, g_edges_seen, g_features, g_corpus.size(), g_corpus_bytes,
          s > 0 ? g_execs / s : 0.0, peak_rss_mb());
}

void keep(const Bytes& input) {
  g_corpus.push_back(input);
  g_corpus_bytes += input.size();
}

int replay_files(const std::vector<std::string>& files) {
  g_replay_only = true;
  for (const std::string& path : files) {
    Bytes input;
    if (!read_file(path, input)) return fprintf(stderr, "ERROR: cannot read %s\n", path.c_str()), 1;
    fprintf(stderr, "Running: %s (%zu bytes)\n", path.c_str(), input.size());
    execute(input);
    fprintf(stderr, "Executed %s: no report\n", path.c_str());
  }
  return 0;
}

void fuzz(const std::vector<std::string>& dirs) {
  size_t seeds = 0;
  for (const std::string& dir : dirs) {
    for (const std::string& path : list_dir(dir)) {
      Bytes input;
      if (!read_file(path, input)) continue;
      seeds++;
      execute(input);  // the whole file, even past max_len: every seed is replayed as it is
      if (input.size() > g_opt.max_len) input.resize(g_opt.max_len);
      add_tokens(input);
      keep(input);
    }
  }
  if (g_corpus.empty()) execute(Bytes{}), keep(Bytes{});
  fprintf(stderr, "INFO: %zu seed inputs, %zu dictionary tokens from them\n", seeds, g_dict.size());
  progress("INITED");
  size_t new_units = 0;
  double next_pulse = 10;
  while (!g_stop) {
    if (g_opt.runs >= 0 && g_execs >= static_cast<size_t>(g_opt.runs)) break;
    double elapsed = seconds_since_start();
    if (g_opt.max_total_time > 0 && elapsed >= g_opt.max_total_time) break;
    if (elapsed >= next_pulse) progress("pulse"), next_pulse += 10;
    // Favour later (deeper) corpus entries: the larger of two uniform picks.
    size_t pick = std::max(g_rng.below(g_corpus.size()), g_rng.below(g_corpus.size()));
    Bytes input = mutate(g_corpus[pick]);
    if (!execute(input) || !g_opt.use_coverage) continue;
    keep(input);
    new_units++;
    if (!dirs.empty()) write_to_dir(dirs[0], input);
    if (g_opt.verbosity > 0) progress("NEW");
  }
  progress("DONE");
  fprintf(stderr, "Done %zu runs in %.0f second(s)\n", g_execs, seconds_since_start());
  if (!g_opt.print_final_stats) return;
  fprintf(stderr, "stat::number_of_executed_units: %zu\nstat::average_exec_per_sec: %.0f\n"
          "stat::new_units_added: %zu\nstat::peak_rss_mb: %zu\nstat::edges: %zu\n",
          g_execs, g_execs / std::max(seconds_since_start(), 1e-9), new_units, peak_rss_mb(),
          g_edges_seen);
}

}  // namespace

int main(int argc, char** argv) {
  g_start = std::chrono::steady_clock::now();
  g_pc_base = reinterpret_cast<uintptr_t>(&LLVMFuzzerTestOneInput);
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  std::vector<std::string> dirs, files;
  for (int i = 1; i < argc; i++) {
    if (parse_flag(argv[i], g_opt)) continue;
    struct stat st {};
    if (stat(argv[i], &st) != 0) return fprintf(stderr, "ERROR: no such path %s\n", argv[i]), 1;
    (S_ISDIR(st.st_mode) ? dirs : files).push_back(argv[i]);
  }
  if (!files.empty() && !dirs.empty()) {
    return fprintf(stderr, "ERROR: give directories (to fuzz) or files (to replay), not both\n"), 1;
  }
  g_record_cmps = g_opt.use_cmp && g_opt.use_coverage;
  if (!g_opt.seed) g_opt.seed = static_cast<uint64_t>(time(nullptr)) << 16 ^ getpid();
  g_rng.state = g_opt.seed * 0x9E3779B97F4A7C15ull | 1;  // xorshift needs a nonzero state
  fprintf(stderr, "INFO: Seed: %llu\n", static_cast<unsigned long long>(g_opt.seed));
  __sanitizer_install_malloc_and_free_hooks(count_malloc, count_free);
  install_handlers();
  if (!files.empty() && dirs.empty()) return replay_files(files);
  fuzz(dirs);
  return 0;
}
