// Eight nested single-byte branches: coverage guidance reaches the abort() at the bottom in a
// few thousand inputs; blind mutation would need about 256^8.
#include <cstdint>
#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 8) return 0;
  if (data[0] == 'o')
    if (data[1] == 'p')
      if (data[2] == 'f')
        if (data[3] == 'o')
          if (data[4] == 'r')
            if (data[5] == 'g')
              if (data[6] == 'e')
                if (data[7] == '!') abort();
  return 0;
}
