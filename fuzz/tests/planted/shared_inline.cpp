// Instantiates std::min<unsigned long>, which the engine's hooks used to call: at -O0 the linker
// may keep this instrumented copy for the whole program, whose comparison re-enters the hook.
#include <algorithm>
#include <cstddef>
#include <cstdint>

volatile size_t g_sink;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  g_sink = std::min<size_t>(size, 8) + (size > 0 ? data[0] : 0);
  return 0;
}
