#include "image.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "elf_dynamic.h"
#include "files.h"
#include "sha256.h"
#include "text.h"

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

// glibc hands back an object already loaded under the name dlopen is asked for, and the memfd is
// closed once mapped, so its number will name other files while the mapping lives. The k-th name
// of this process spells /proc/self/fd/N with k's binary digits inserted as "//" (1) or "/."
// (0), both no-ops in a path: no two loads of a process ever share a name.
std::string unique_fd_path(int fd) {
  static std::atomic<uint64_t> next{0};
  std::string spelling;
  for (uint64_t k = next.fetch_add(1); k != 0; k >>= 1) spelling.insert(0, (k & 1) ? "//" : "/.");
  return "/proc/self/fd" + spelling + "/" + std::to_string(fd);
}

int has_loaded_name(struct dl_phdr_info* info, size_t, void* name) {
  return info->dlpi_name && std::strcmp(info->dlpi_name, static_cast<const char*>(name)) == 0;
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
  const std::string dlopen_path = unique_fd_path(fd);
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

bool check_image_header(const LibraryImage& image, std::string& reason) {
  unsigned char header[EI_NIDENT + 4] = {0};
  ssize_t got;
  do {
    got = ::pread(image.fd, header, sizeof header, 0);
  } while (got < 0 && errno == EINTR);
  if (got < 0) {
    reason = std::string("cannot read the verified copy of the library: ") + std::strerror(errno);
    return false;
  }
  return check_elf_header(header, static_cast<size_t>(got), reason);
}

bool mapping_released(const std::string& dlopen_path) {
  // By name only: opening the path again would open whatever its descriptor number names now.
  return ::dl_iterate_phdr(has_loaded_name, const_cast<char*>(dlopen_path.c_str())) == 0;
}

// ---------------------------------------------------------------------------------------------
// $ORIGIN dependencies

namespace {

std::string shown(const std::string& outside) { return printable(outside, 300); }

std::string directory_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

bool is_identifier_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// entry with $ORIGIN / ${ORIGIN} replaced by origin. other_token: another dynamic string token
// ($LIB, $PLATFORM), which only glibc expands; such an entry is not ours to resolve.
std::string expand_origin(const std::string& entry, const std::string& origin, bool& uses_origin, bool& other_token) {
  std::string out;
  uses_origin = other_token = false;
  for (size_t i = 0; i < entry.size(); ++i) {
    if (entry[i] != '$') {
      out += entry[i];
    } else if (entry.compare(i + 1, 8, "{ORIGIN}") == 0) {
      out += origin;
      i += 8;
      uses_origin = true;
    } else if (entry.compare(i + 1, 6, "ORIGIN") == 0 && (i + 7 >= entry.size() || !is_identifier_char(entry[i + 7]))) {
      out += origin;
      i += 6;
      uses_origin = true;
    } else {
      out += '$';
      other_token = true;
    }
  }
  if (out.empty()) out = ".";  // glibc: an empty entry is the current directory
  return out;
}

std::vector<std::string> expanded_origin_dirs(const DynamicInfo& info, const std::string& origin) {
  std::vector<std::string> dirs;
  for (const std::string& entry : info.search_path) {
    bool uses_origin, other_token;
    std::string dir = expand_origin(entry, origin, uses_origin, other_token);
    if (uses_origin && !other_token) dirs.push_back(dir);
  }
  return dirs;
}

bool is_regular_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool found_in_ld_library_path(const std::string& needed) {
  const char* env = std::getenv("LD_LIBRARY_PATH");
  std::istringstream dirs(env ? env : "");
  for (std::string dir; std::getline(dirs, dir, ':');)
    if (!dir.empty() && is_regular_file(dir + "/" + needed)) return true;
  return false;
}

// Where the plugin's search path finds needed, if glibc would take it from a $ORIGIN entry: in
// glibc's order (DT_RPATH, else LD_LIBRARY_PATH then DT_RUNPATH); "" when it looks elsewhere.
std::string found_through_origin(const std::string& needed, const DynamicInfo& info, const std::string& origin) {
  if (info.has_runpath && found_in_ld_library_path(needed)) return "";
  for (const std::string& entry : info.search_path) {
    bool uses_origin, other_token;
    const std::string dir = expand_origin(entry, origin, uses_origin, other_token);
    if (other_token || !is_regular_file(dir + "/" + needed)) continue;
    return uses_origin ? dir + "/" + needed : "";
  }
  return "";
}

bool read_image_dynamic_info(const LibraryImage& image, const std::string& library_path, DynamicInfo& info,
                             std::string& reason) {
  struct stat st {};
  if (::fstat(image.fd, &st) != 0 || st.st_size <= 0) return true;  // nothing to read: dlopen says why
  const size_t size = static_cast<size_t>(st.st_size);
  void* bytes = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, image.fd, 0);
  if (bytes == MAP_FAILED) {
    reason = std::string("cannot read the verified copy of the library: mmap: ") + std::strerror(errno);
    return false;
  }
  bool ok = read_dynamic_info(static_cast<const unsigned char*>(bytes), size, info, reason);
  ::munmap(bytes, size);
  if (!ok) reason = "malformed ELF dynamic section in " + library_path + ": " + reason;
  return ok;
}

// searches_origin: the search path has a $ORIGIN entry (else only DT_NEEDED paths are checked).
bool find_origin_dependencies(const DynamicInfo& info, const std::string& origin, bool searches_origin,
                              std::vector<OriginDependency>& deps, std::string& reason) {
  for (const std::string& needed : info.needed) {
    if (needed.find('/') != std::string::npos) {
      bool uses_origin, other_token;
      expand_origin(needed, origin, uses_origin, other_token);
      if (!uses_origin) continue;
      // glibc looks such a name up among loaded objects unexpanded: a loaded copy can never match.
      reason = "DT_NEEDED \"" + shown(needed) + "\" names its dependency by a $ORIGIN path, which cannot "
               "be resolved for a plugin mapped from its verified in-memory copy; link the dependency by its "
               "SONAME and give the plugin RUNPATH $ORIGIN";
      return false;
    }
    std::string path = searches_origin ? found_through_origin(needed, info, origin) : "";
    if (!path.empty()) deps.push_back({needed, path});
  }
  return true;
}

// The world-writable rule of the plugin, for the dependency's link and the file it leads to.
bool check_dependency_location(const OriginDependency& dep, std::string& reason) {
  if (check_not_world_writable(dep.path, reason) && check_not_world_writable(absolute_path(dep.path), reason))
    return true;
  reason = "dependency " + shown(dep.needed) + " found through $ORIGIN: " + reason;
  return false;
}

// (device, inode) of the file the loaded object was mapped from: its dynamic section's mapping in
// /proc/self/maps (its path may have been replaced since).
bool mapped_file_of(void* handle, uint64_t& dev, uint64_t& ino) {
  struct link_map* map = nullptr;
  if (::dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || !map) return false;
  const auto at = reinterpret_cast<uintptr_t>(map->l_ld);
  std::string maps, why;
  if (!read_regular_file("/proc/self/maps", "process map", size_t(64) << 20, maps, why)) return false;
  std::istringstream lines(maps);
  for (std::string line; std::getline(lines, line);) {
    unsigned long long start, end, offset, inode;
    unsigned major_id, minor_id;
    char perms[8];
    if (std::sscanf(line.c_str(), "%llx-%llx %7s %llx %x:%x %llu", &start, &end, perms, &offset, &major_id, &minor_id,
                    &inode) != 7 || at < start || at >= end)
      continue;
    dev = makedev(major_id, minor_id);
    ino = inode;
    return true;
  }
  return false;
}

std::string loaded_name(void* handle) {
  struct link_map* map = nullptr;
  return ::dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name ? map->l_name : "?";
}

// glibc binds the plugin's DT_NEEDED to an object already loaded under that SONAME, as it would
// for any library; when that object is not the file $ORIGIN leads to, the log says so.
void warn_if_other_file(void* loaded, const OriginDependency& dep, const std::string& plugin, std::vector<std::string>& warnings) {
  struct stat st {};
  uint64_t dev = 0, ino = 0;
  if (::stat(dep.path.c_str(), &st) != 0 || !mapped_file_of(loaded, dev, ino)) return;
  if (dev == st.st_dev && ino == st.st_ino) return;
  warnings.push_back("opforge-loader dependency file=" + plugin + " needed=" + shown(dep.needed) + " origin=" +
                     shown(dep.path) + " uses=" + shown(loaded_name(loaded)) +
                     " reason=\"a library with this SONAME is already loaded (glibc binds DT_NEEDED by SONAME), "
                     "so the plugin runs with it, not with the file next to it; give a changed dependency a new SONAME\"");
}

enum class Opened { Yes, NotYet, Refused };

Opened open_dependency(const OriginDependency& dep, const std::string& plugin, OriginDependencies& out, std::string& error) {
  if (void* loaded = ::dlopen(dep.needed.c_str(), RTLD_NOW | RTLD_NOLOAD)) {
    warn_if_other_file(loaded, dep, plugin, out.warnings);
    out.handles.push_back(loaded);
    return Opened::Yes;
  }
  void* handle = ::dlopen(dep.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* text = ::dlerror();
    error = "dependency " + shown(dep.needed) + " found through $ORIGIN at " + shown(dep.path) +
            " failed to load: " + printable(text ? text : "?", 1000);
    return Opened::NotYet;
  }
  out.handles.push_back(handle);
  // What the plugin's DT_NEEDED will bind to: the object glibc finds under that name now.
  void* bound = ::dlopen(dep.needed.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (bound) ::dlclose(bound);
  if (bound == handle) return Opened::Yes;
  error = "dependency " + shown(dep.needed) + " found through $ORIGIN at " + shown(dep.path) +
          " does not carry the SONAME " + shown(dep.needed) +
          " (glibc satisfies the plugin's DT_NEEDED from a loaded library only by SONAME; link it with -Wl,-soname," +
          shown(dep.needed) + ")";
  return Opened::Refused;
}

// One dependency may need another found the same way (DT_RPATH is inherited): retry those that
// failed for as long as another one loads.
bool open_dependencies(const std::vector<OriginDependency>& deps, const std::string& plugin, OriginDependencies& out,
                       std::string& reason) {
  std::vector<const OriginDependency*> pending;
  for (const OriginDependency& dep : deps) pending.push_back(&dep);
  while (!pending.empty()) {
    std::vector<const OriginDependency*> failed;
    std::string first_error;
    for (const OriginDependency* dep : pending) {
      std::string error;
      Opened opened = open_dependency(*dep, plugin, out, error);
      if (opened == Opened::Refused) { reason = error; return false; }
      if (opened == Opened::NotYet) {
        failed.push_back(dep);
        if (first_error.empty()) first_error = error;
      }
    }
    if (failed.size() == pending.size()) { reason = first_error; return false; }
    pending.swap(failed);
  }
  return true;
}

}  // namespace

bool check_origin_dependencies(const LibraryImage& image, const std::string& library_path, OriginDependencies& out,
                               std::string& reason) {
  if (::getauxval(AT_SECURE)) return true;  // glibc ignores $ORIGIN in a set-user-ID process
  DynamicInfo info;
  if (!read_image_dynamic_info(image, library_path, info, reason)) return false;
  const std::string origin = directory_of(library_path);
  out.origin_dirs = expanded_origin_dirs(info, origin);
  if (!find_origin_dependencies(info, origin, !out.origin_dirs.empty(), out.found, reason)) return false;
  for (const OriginDependency& dep : out.found)
    if (!check_dependency_location(dep, reason)) return false;  // before any of them runs code
  return true;
}

bool open_origin_dependencies(const std::string& library_path, OriginDependencies& out, std::string& reason) {
  if (open_dependencies(out.found, library_path, out, reason)) return true;
  close_dependencies(out.handles);
  return false;
}

void close_dependencies(std::vector<void*>& handles) {
  for (auto it = handles.rbegin(); it != handles.rend(); ++it) ::dlclose(*it);
  handles.clear();
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
