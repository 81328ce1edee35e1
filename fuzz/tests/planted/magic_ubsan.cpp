// Planted bug: signed integer overflow (UBSan) behind a 32-bit magic number.
#include <climits>
#include <cstdint>
#include <cstring>

volatile int g_sink;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  uint32_t magic;
  if (size < 5) return 0;
  memcpy(&magic, data, sizeof magic);
  if (magic != 0xC0FFEE42u) return 0;
  int total = INT_MAX - 3;
  total += data[4];  // the bug: overflows for data[4] > 3
  g_sink = total;
  return 0;
}
