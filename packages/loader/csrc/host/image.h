// What is hashed is what is mapped. A library is read ONCE (a bounded read of a regular file),
// each chunk hashed and written into a sealed memfd; dlopen maps "/proc/self/fd/N". The memfd
// stays open until after dlclose, so while a mapping lives no other load can share its name or
// inode: glibc's "already loaded" lookup (by path, then by device + inode) can never hand back an
// older mapping, and init/unload run exactly once per mapping.
#pragma once
#include <string>

#include "manifest.h"

namespace opforge::loader {

struct LibraryImage {
  int fd = -1;              // sealed memfd holding exactly the verified bytes
  std::string sha256;       // of those bytes
  FileId source_id;         // the file they were read from (fstat of the descriptor read)
  std::string dlopen_path;  // "/proc/self/fd/N": the name dlopen knows the mapping by
};

// Reads path (regular file, at most kMaxLibraryBytes) into a new sealed memfd and hashes it.
// On failure nothing stays open.
bool make_library_image(const std::string& path, LibraryImage& out, std::string& reason);

// Hashes path (regular file, at most kMaxLibraryBytes) without keeping a copy.
bool hash_library_file(const std::string& path, FileId& id, std::string& sha256, std::string& reason);

// The sha256 a manifest names against the one computed; reason names both.
bool check_digest(const Manifest& m, const std::string& digest, std::string& reason);

// After dlclose: true when the mapping is gone. A library glibc keeps resident (RTLD_NODELETE,
// -z nodelete, STB_GNU_UNIQUE symbols) must keep its memfd open forever, or a later memfd could
// reuse its name or inode and be mistaken for it.
bool mapping_released(const std::string& dlopen_path);

// "/proc/self/fd/N" in a dlerror text replaced by the file the bytes came from.
std::string with_real_path(std::string text, const std::string& dlopen_path, const std::string& real_path);

}  // namespace opforge::loader
