// Planted bugs: "HANG" loops forever (a timeout); "LEAK" loses an allocation.
#include <cstdint>
#include <cstdlib>
#include <cstring>

void* volatile g_sink;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size >= 4 && memcmp(data, "HANG", 4) == 0)
    for (volatile int spin = 0;; spin = spin + 0) {}
  if (size >= 4 && memcmp(data, "LEAK", 4) == 0) {
    g_sink = malloc(64);
    g_sink = nullptr;
  }
  return 0;
}
