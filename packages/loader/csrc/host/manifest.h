// <library>.manifest.json: read, validated and matched against the library file BEFORE dlopen.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace opforge::loader {

struct ManifestOp {
  std::string domain;
  std::string name;
  int64_t version = 0;
};

struct Manifest {
  std::string manifest_path;  // absolute
  std::string library_path;   // absolute: directory of the manifest + "library"
  std::string name;
  std::string library;
  std::string version;
  std::string kind;
  int64_t api_version = 0;
  std::string sdk_min;
  std::string sdk_max;  // "" = no upper bound
  std::vector<ManifestOp> ops;
  std::string sha256;
};

// Identity of a file on disk, for "did it change?" and "is it what we hashed?".
struct FileId {
  uint64_t dev = 0, ino = 0, size = 0;
  int64_t mtime_ns = 0;
  bool operator==(const FileId& o) const {
    return dev == o.dev && ino == o.ino && size == o.size && mtime_ns == o.mtime_ns;
  }
  bool operator!=(const FileId& o) const { return !(*this == o); }
};

std::string manifest_path_for(const std::string& library_path);
std::string absolute_path(const std::string& path);

// Each returns false with a one-line reason (the caller prefixes the file name).
bool read_manifest(const std::string& manifest_path, Manifest& out, std::string& reason);
// The checks of read_manifest on bytes already read (manifest_path: absolute; only its name and
// directory are used). Pure: no file system access. Never throws except std::bad_alloc.
bool parse_manifest(const std::string& text, const std::string& manifest_path, Manifest& out, std::string& reason);
bool check_not_world_writable(const std::string& path, std::string& reason);
bool stat_file(const std::string& path, FileId& id, std::string& reason);
// Hashes the library through one open descriptor and returns the identity it hashed.
bool check_sha256(const Manifest& m, const std::string& path, FileId& hashed, std::string& reason);
// kind "opforge": api_version within the host range and the host version within sdk.
bool check_opforge_compat(const Manifest& m, const char* host_version, std::string& reason);
bool check_sdk_range(const Manifest& m, const std::string& runtime_version, std::string& reason);
int compare_versions(const std::string& a, const std::string& b);

}  // namespace opforge::loader
