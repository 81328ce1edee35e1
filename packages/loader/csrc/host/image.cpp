#include "image.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "files.h"
#include "sha256.h"

#ifndef MFD_CLOEXEC
#define MFD_CLOEXEC 0x0001U
#endif
#ifndef MFD_ALLOW_SEALING
#define MFD_ALLOW_SEALING 0x0002U
#endif
#ifndef MFD_EXEC
#define MFD_EXEC 0x0010U
#endif
#ifndef F_ADD_SEALS
#define F_ADD_SEALS 1033
#define F_SEAL_SEAL 0x0001
#define F_SEAL_SHRINK 0x0002
#define F_SEAL_GROW 0x0004
#define F_SEAL_WRITE 0x0008
#endif

namespace opforge::loader {
namespace {

FileId id_of(const struct stat& st) {
  FileId id;
  id.dev = st.st_dev;
  id.ino = st.st_ino;
  id.size = static_cast<uint64_t>(st.st_size);
  id.mtime_ns = int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return id;
}

std::string base_name(const std::string& path) { return path.substr(path.rfind('/') + 1); }

// The raw syscall: glibc's wrapper needs 2.27, and MFD_EXEC (Linux >= 6.3, needed where
// vm.memfd_noexec is set) is refused with EINVAL by older kernels, so try with it first.
int create_memfd(const std::string& library_path, std::string& reason) {
  const std::string name = ("opforge:" + base_name(library_path)).substr(0, 240);
  for (unsigned flags : {MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_EXEC, MFD_CLOEXEC | MFD_ALLOW_SEALING}) {
    long fd = ::syscall(SYS_memfd_create, name.c_str(), flags);
    if (fd >= 0) return static_cast<int>(fd);
    if (errno != EINVAL) break;
  }
  reason = std::string("cannot create the in-memory copy the library is mapped from (memfd_create: ") +
           std::strerror(errno) + ")";
  return -1;
}

bool write_all(int fd, const unsigned char* p, size_t n, std::string& reason) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      reason = std::string("cannot copy the library into memory: ") + std::strerror(errno);
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// Streams the regular file at path through the hash and, when copy_fd >= 0, into copy_fd.
bool read_and_hash(const std::string& path, int copy_fd, FileId& id, std::string& sha256, std::string& reason) {
  struct stat st {};
  int fd = open_regular_file(path, "library", st, reason);
  if (fd < 0) return false;
  Sha256 sha;
  bool ok = read_bounded(fd, path, kMaxLibraryBytes, [&](const unsigned char* p, size_t n, std::string& why) {
    sha.update(p, n);
    return copy_fd < 0 || write_all(copy_fd, p, n, why);
  }, reason);
  ::close(fd);
  if (!ok) return false;
  id = id_of(st);
  sha256 = sha.hex();
  return true;
}

}  // namespace

bool hash_library_file(const std::string& path, FileId& id, std::string& sha256, std::string& reason) {
  return read_and_hash(path, -1, id, sha256, reason);
}

bool make_library_image(const std::string& path, LibraryImage& out, std::string& reason) {
  int fd = create_memfd(path, reason);
  if (fd < 0) return false;
  bool ok = read_and_hash(path, fd, out.source_id, out.sha256, reason);
  // Sealed: the bytes cannot change any more, not even through /proc/<pid>/fd.
  if (ok && ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0) {
    reason = std::string("cannot seal the in-memory copy of the library: ") + std::strerror(errno);
    ok = false;
  }
  if (!ok) {
    ::close(fd);
    return false;
  }
  const std::string dlopen_path = "/proc/self/fd/" + std::to_string(fd);
  if (::access(dlopen_path.c_str(), R_OK) != 0) {
    reason = "cannot map the verified copy of the library: " + dlopen_path + " is not accessible (" +
             std::strerror(errno) + "; the host needs /proc mounted)";
    ::close(fd);
    return false;
  }
  out.fd = fd;
  out.dlopen_path = dlopen_path;
  return true;
}

bool check_digest(const Manifest& m, const std::string& digest, std::string& reason) {
  if (digest == m.sha256) return true;
  reason = "sha256 mismatch: manifest says " + m.sha256 + ", file has " + digest +
           " (library rebuilt or tampered with; regenerate the manifest)";
  return false;
}

bool mapping_released(const std::string& dlopen_path) {
  void* still = ::dlopen(dlopen_path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (!still) return true;
  ::dlclose(still);
  return false;
}

std::string with_real_path(std::string text, const std::string& dlopen_path, const std::string& real_path) {
  std::string out;
  size_t pos = 0;
  for (size_t at; (at = text.find(dlopen_path, pos)) != std::string::npos; pos = at + dlopen_path.size()) {
    const size_t end = at + dlopen_path.size();
    const bool longer_fd = end < text.size() && text[end] >= '0' && text[end] <= '9';  // fd 1 vs fd 12
    out.append(text, pos, at - pos);
    out += longer_fd ? dlopen_path : real_path;
  }
  return out + text.substr(pos);
}

}  // namespace opforge::loader
