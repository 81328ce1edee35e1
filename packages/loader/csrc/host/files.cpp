#include "files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace opforge::loader {
namespace {

const char* file_type_name(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

int open_regular_file(const std::string& path, const char* what, struct stat& st, std::string& reason, int* errno_out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (errno_out) *errno_out = fd < 0 ? errno : 0;
  if (fd < 0) {
    reason = std::string("cannot open ") + what + " " + path + ": " + std::strerror(errno);
    return -1;
  }
  if (::fstat(fd, &st) != 0) {
    reason = std::string("cannot stat ") + what + " " + path + ": " + std::strerror(errno);
    ::close(fd);
    return -1;
  }
  if (!S_ISREG(st.st_mode)) {
    reason = std::string(what) + " " + path + " is " + file_type_name(st.st_mode) + ", expected a regular file";
    ::close(fd);
    return -1;
  }
  return fd;
}

bool read_bounded(int fd, const std::string& path, size_t max_bytes,
                  const std::function<bool(const unsigned char*, size_t, std::string&)>& sink, std::string& reason) {
  std::vector<unsigned char> buf(size_t(1) << 16);
  size_t total = 0;
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n == 0) return true;
    if (n < 0) {
      if (errno == EINTR) continue;
      reason = "cannot read " + path + ": " + std::strerror(errno);
      return false;
    }
    total += static_cast<size_t>(n);
    if (total > max_bytes) {
      reason = path + " is larger than " + std::to_string(max_bytes) + " bytes";
      return false;
    }
    if (!sink(buf.data(), static_cast<size_t>(n), reason)) return false;
  }
}

bool read_regular_file(const std::string& path, const char* what, size_t max_bytes, std::string& out,
                       std::string& reason, int* errno_out) {
  struct stat st {};
  int fd = open_regular_file(path, what, st, reason, errno_out);
  if (fd < 0) return false;
  out.clear();
  bool ok = read_bounded(fd, path, max_bytes, [&](const unsigned char* p, size_t n, std::string&) {
    out.append(reinterpret_cast<const char*>(p), n);
    return true;
  }, reason);
  ::close(fd);
  return ok;
}

}  // namespace opforge::loader
