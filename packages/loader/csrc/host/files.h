// Reading files named by outside input: only regular files, never blocking, never unbounded.
#pragma once
#include <sys/stat.h>

#include <cstddef>
#include <functional>
#include <string>

namespace opforge::loader {

constexpr size_t kMaxManifestBytes = size_t(1) << 20;
// A plugin with device code for many GPU architectures can be hundreds of MB; anything past this
// is not a plugin (e.g. a link to a huge or endless file) and must not exhaust memory.
constexpr size_t kMaxLibraryBytes = size_t(2) << 30;

// Opens with O_NONBLOCK (a FIFO without writer must not hang the open) and O_CLOEXEC, then
// accepts only a regular file (checked on the descriptor, so a swap after a stat cannot sneak a
// FIFO or device in). Returns the descriptor, or -1 with reason set; errno_out gets open's errno.
int open_regular_file(const std::string& path, const char* what, struct stat& st, std::string& reason,
                      int* errno_out = nullptr);

// Reads fd to its end in chunks handed to sink; refuses more than max_bytes.
bool read_bounded(int fd, const std::string& path, size_t max_bytes,
                  const std::function<bool(const unsigned char*, size_t, std::string&)>& sink, std::string& reason);

// The whole of a regular file of at most max_bytes.
bool read_regular_file(const std::string& path, const char* what, size_t max_bytes, std::string& out,
                       std::string& reason, int* errno_out = nullptr);

}  // namespace opforge::loader
