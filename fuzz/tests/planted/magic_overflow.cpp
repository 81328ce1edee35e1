// Planted bug: a heap overflow behind a 4-byte magic (memcmp) and a 2-byte version field.
#include <cstdint>
#include <cstdlib>
#include <cstring>

char* volatile g_table;  // volatile: the compiler may not drop the allocation and the write

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 8 || memcmp(data, "OPFG", 4) != 0) return 0;
  uint16_t version;
  memcpy(&version, data + 4, sizeof version);
  if (version != 0x0307) return 0;
  size_t capacity = 8 + (data[7] & 1);  // not a constant: ASan, not UBSan's object-size, finds it
  size_t count = data[6] % 16;
  g_table = static_cast<char*>(malloc(capacity));
  memset(g_table, '.', count);  // the bug: count is never checked against the capacity
  free(g_table);
  return 0;
}
