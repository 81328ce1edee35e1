// SHA-256 (FIPS 180-4), fed incrementally: the bytes hashed are exactly the bytes handed over.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace opforge::loader {

class Sha256 {
 public:
  void update(const unsigned char* data, size_t n);
  std::string hex();  // lowercase; finishes the digest (call once)

 private:
  uint32_t h_[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  unsigned char block_[64];
  size_t used_ = 0;
  uint64_t total_ = 0;

  void compress(const unsigned char* p);
};

}  // namespace opforge::loader
