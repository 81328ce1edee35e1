// SHA-256 (FIPS 180-4) of a file, read through an already-open descriptor.
#pragma once
#include <string>

namespace opforge::loader {

// Returns lowercase hex, or "" with error set when reading fails.
std::string sha256_fd(int fd, std::string& error);

}  // namespace opforge::loader
