// What is hashed is what is mapped. A library is read ONCE (a bounded read of a regular file),
// each chunk hashed and written into a sealed memfd; dlopen maps it through a /proc/self/fd/N
// name that no other load of this process ever gets (glibc's "already loaded" lookup by name can
// never hand back an older mapping; one by device + inode cannot either, as the mapping keeps the
// memfd's inode alive). The memfd is closed once mapped: a loaded plugin holds no descriptor.
#pragma once
#include <string>
#include <vector>

#include "manifest.h"

namespace opforge::loader {

struct LibraryImage {
  int fd = -1;              // sealed memfd holding exactly the verified bytes
  std::string sha256;       // of those bytes
  FileId source_id;         // the file they were read from (fstat of the descriptor read)
  std::string dlopen_path;  // a /proc/self/fd/N unique in this process: the name dlopen knows the mapping by
};

// Reads path (regular file, at most kMaxLibraryBytes) into a new sealed memfd and hashes it.
// On failure nothing stays open.
bool make_library_image(const std::string& path, LibraryImage& out, std::string& reason);

// Hashes path (regular file, at most kMaxLibraryBytes) without keeping a copy.
bool hash_library_file(const std::string& path, FileId& id, std::string& sha256, std::string& reason);

// The verified bytes are an ELF object of this host's class, byte order and machine
// (elf_dynamic.h: check_elf_header); reason names the expected and the found ones.
bool check_image_header(const LibraryImage& image, std::string& reason);

// The sha256 a manifest names against the one computed; reason names both.
bool check_digest(const Manifest& m, const std::string& digest, std::string& reason);

// After dlclose: true when the mapping is gone, false for a library glibc keeps resident
// (RTLD_NODELETE, -z nodelete, STB_GNU_UNIQUE symbols).
bool mapping_released(const std::string& dlopen_path);

// $ORIGIN. Mapped from /proc/self/fd/N, the plugin's own $ORIGIN names /proc/self/fd. So before
// the plugin is mapped, each DT_NEEDED that its DT_RUNPATH / DT_RPATH would find through $ORIGIN
// (read from the verified image, elf_dynamic.h) is dlopen'ed from the plugin's real directory,
// RTLD_NOW | RTLD_LOCAL; glibc then satisfies the plugin's DT_NEEDED by SONAME with that loaded
// object (checked for each one: a dependency glibc would not bind is refused). Dependencies are
// not hashed (the manifest covers the plugin file): they are trusted like any DT_NEEDED library,
// except that a world-writable dependency file or directory is refused before anything is opened.
struct OriginDependency {
  std::string needed;  // the plugin's DT_NEEDED name (outside input: printable() in messages)
  std::string path;    // where its search path finds it through $ORIGIN
};

struct OriginDependencies {
  std::vector<OriginDependency> found;   // checked by check_origin_dependencies, to open
  std::vector<void*> handles;            // to dlclose after the plugin's dlclose (close_dependencies)
  std::vector<std::string> origin_dirs;  // the search path's $ORIGIN entries, expanded (for messages)
  std::vector<std::string> warnings;     // log lines: a dependency glibc takes from another file
};

// Finds the $ORIGIN dependencies of the plugin whose verified image this is (library_path: the
// real file) and checks where they lie; opens nothing. reason names a malformed dynamic section or
// the dependency refused.
bool check_origin_dependencies(const LibraryImage& image, const std::string& library_path, OriginDependencies& out,
                               std::string& reason);

// Opens what check_origin_dependencies found. On refusal nothing stays open and reason names the
// dependency.
bool open_origin_dependencies(const std::string& library_path, OriginDependencies& out, std::string& reason);

// dlclose in reverse order of opening; empties handles.
void close_dependencies(std::vector<void*>& handles);

// "/proc/self/fd/N" in a dlerror text replaced by the file the bytes came from.
std::string with_real_path(std::string text, const std::string& dlopen_path, const std::string& real_path);

}  // namespace opforge::loader
