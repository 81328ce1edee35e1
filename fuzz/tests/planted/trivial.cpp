// Does nearly nothing: measures the engine's own cost per input.
#include <cstddef>
#include <cstdint>

volatile uint8_t g_sink;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 0) g_sink = data[0];
  return 0;
}
