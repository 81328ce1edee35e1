#include "manifest.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "files.h"
#include "image.h"
#include "json.h"
#include "opforge/plugin.h"
#include "sha256.h"
#include "text.h"

namespace opforge::loader {
namespace {

const char* const kKinds[] = {"opforge", "onnxruntime", "tensorrt"};

std::string dirname_of(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// Character-class checks with a length bound, in place of std::regex (whose matcher recursed
// once per character: a 30,000-character name overflowed the stack).
constexpr size_t kMaxName = 128, kMaxVersion = 64, kMaxLibrary = 255;

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_alnum(char c) { return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

bool all_of_class(const std::string& s, size_t begin, size_t end, bool (*ok)(char)) {
  if (begin >= end) return false;
  for (size_t i = begin; i < end; ++i)
    if (!ok(s[i])) return false;
  return true;
}

bool is_name_char(char c) { return is_alnum(c) || c == '_' || c == '.' || c == '-'; }
bool is_label_char(char c) { return is_alnum(c) || c == '.' || c == '-'; }

// [A-Za-z0-9_.-]{1,kMaxName}
bool is_plugin_name(const std::string& s) { return s.size() <= kMaxName && all_of_class(s, 0, s.size(), is_name_char); }

// N(.N)* with N = [0-9]+, at most kMaxVersion characters
bool is_dotted_numbers(const std::string& s, size_t begin, size_t end, int parts_required) {
  int parts = 0;
  size_t start = begin;
  for (size_t i = begin; i <= end; ++i) {
    if (i < end && s[i] != '.') continue;
    if (!all_of_class(s, start, i, is_digit)) return false;
    ++parts;
    start = i + 1;
  }
  return parts_required == 0 || parts == parts_required;
}

bool is_sdk_version(const std::string& s) { return s.size() <= kMaxVersion && is_dotted_numbers(s, 0, s.size(), 0); }

// MAJOR.MINOR.PATCH([-+][0-9A-Za-z.-]+)?
bool is_semver(const std::string& s) {
  if (s.size() > kMaxVersion) return false;
  const size_t suffix = std::min(s.find('-'), s.find('+'));
  const size_t core_end = suffix == std::string::npos ? s.size() : suffix;
  if (!is_dotted_numbers(s, 0, core_end, 3)) return false;
  return core_end == s.size() || all_of_class(s, core_end + 1, s.size(), is_label_char);
}

bool is_lower_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f'); }
bool is_sha256_hex(const std::string& s) { return s.size() == 64 && all_of_class(s, 0, s.size(), is_lower_hex); }

std::string shown(const std::string& value) { return "\"" + printable(value) + "\""; }

// Field readers: each names the field and what it expected, like every opforge message.
bool get_string(const Json& obj, const char* key, std::string& out, std::string& reason) {
  const Json* v = obj.find(key);
  if (!v) { reason = std::string("malformed manifest: missing field \"") + key + "\""; return false; }
  if (v->type != Json::Type::String) {
    reason = std::string("malformed manifest: \"") + key + "\": expected string, got " + v->type_name();
    return false;
  }
  out = v->string;
  return true;
}

bool get_int(const Json& obj, const char* key, int64_t& out, std::string& reason) {
  const Json* v = obj.find(key);
  if (!v) { reason = std::string("malformed manifest: missing field \"") + key + "\""; return false; }
  if (v->type != Json::Type::Number || !v->integral) {
    reason = std::string("malformed manifest: \"") + key + "\": expected integer, got " + v->type_name();
    return false;
  }
  if (!v->fits_int64) {
    reason = std::string("malformed manifest: \"") + key +
             "\": expected an integer from -9223372036854775808 to 9223372036854775807, got " + printable(v->string);
    return false;
  }
  out = v->integer;
  return true;
}

bool read_sdk(const Json& root, Manifest& m, std::string& reason) {
  const Json* sdk = root.find("sdk");
  if (!sdk || sdk->type != Json::Type::Object) {
    reason = std::string("malformed manifest: \"sdk\": expected object {\"min\": \"X.Y\", \"max\": \"X.Y\" or null}, got ") +
             (sdk ? sdk->type_name() : "nothing");
    return false;
  }
  if (!get_string(*sdk, "min", m.sdk_min, reason)) return false;
  const Json* max = sdk->find("max");
  if (max && max->type == Json::Type::String) m.sdk_max = max->string;
  else if (max && max->type != Json::Type::Null) {
    reason = std::string("malformed manifest: \"sdk.max\": expected string or null, got ") + max->type_name();
    return false;
  }
  // min is required; max is a version too when it is a string ("" is not "no bound": null is).
  const bool max_given = max && max->type == Json::Type::String;
  for (const std::string* v : {&m.sdk_min, &m.sdk_max}) {
    if ((v == &m.sdk_min || max_given) && !is_sdk_version(*v)) {
      reason = "malformed manifest: \"sdk\": expected dotted version numbers (at most " + std::to_string(kMaxVersion) +
               " characters), got " + shown(*v);
      return false;
    }
  }
  if (!m.sdk_max.empty() && compare_versions(m.sdk_min, m.sdk_max) > 0) {
    reason = "malformed manifest: \"sdk\": min " + m.sdk_min + " is above max " + m.sdk_max;
    return false;
  }
  return true;
}

bool read_ops(const Json& root, Manifest& m, std::string& reason) {
  const Json* ops = root.find("ops");
  if (!ops || ops->type != Json::Type::Array || ops->array.empty()) {
    reason = "malformed manifest: \"ops\": expected non-empty array of {domain, name, version}";
    return false;
  }
  for (size_t i = 0; i < ops->array.size(); ++i) {
    const Json& o = ops->array[i];
    ManifestOp op;
    std::string where = "ops[" + std::to_string(i) + "]";
    if (o.type != Json::Type::Object || !get_string(o, "domain", op.domain, reason) ||
        !get_string(o, "name", op.name, reason) || !get_int(o, "version", op.version, reason)) {
      if (reason.empty()) reason = "malformed manifest: \"" + where + "\": expected object";
      else reason += " (in " + where + ")";
      return false;
    }
    if (op.version < 1 || op.version > UINT32_MAX || !is_plugin_name(op.name) ||
        (!op.domain.empty() && !is_plugin_name(op.domain))) {
      reason = "malformed manifest: \"" + where + "\": expected a name and domain of [A-Za-z0-9_.-]{1," +
               std::to_string(kMaxName) + "} and a version from 1 to 4294967295, got " + shown(op.domain) + ", " +
               shown(op.name) + ", " + std::to_string(op.version);
      return false;
    }
    m.ops.push_back(op);
  }
  return true;
}

bool read_fields(const Json& root, Manifest& m, std::string& reason) {
  if (root.type != Json::Type::Object) {
    reason = std::string("malformed manifest: expected a JSON object, got ") + root.type_name();
    return false;
  }
  int64_t manifest_version = 0;
  if (!get_int(root, "manifest_version", manifest_version, reason)) return false;
  if (manifest_version != 1) {
    reason = "malformed manifest: \"manifest_version\": expected 1, got " + std::to_string(manifest_version);
    return false;
  }
  if (!get_string(root, "name", m.name, reason) || !get_string(root, "library", m.library, reason) ||
      !get_string(root, "version", m.version, reason) || !get_string(root, "kind", m.kind, reason) ||
      !get_int(root, "api_version", m.api_version, reason) || !get_string(root, "sha256", m.sha256, reason) ||
      !read_sdk(root, m, reason) || !read_ops(root, m, reason))
    return false;
  if (!is_plugin_name(m.name)) {
    reason = "malformed manifest: \"name\": expected [A-Za-z0-9_.-]{1," + std::to_string(kMaxName) + "}, got " + shown(m.name);
    return false;
  }
  if (m.library.find('/') != std::string::npos || m.library.find('\0') != std::string::npos || m.library.empty() ||
      m.library.size() > kMaxLibrary) {
    reason = "malformed manifest: \"library\": expected a file name without '/' (at most " + std::to_string(kMaxLibrary) +
             " bytes), got " + shown(m.library);
    return false;
  }
  if (!is_semver(m.version)) {
    reason = "malformed manifest: \"version\": expected MAJOR.MINOR.PATCH (at most " + std::to_string(kMaxVersion) +
             " characters), got " + shown(m.version);
    return false;
  }
  bool known_kind = false;
  for (const char* k : kKinds) known_kind |= (m.kind == k);
  if (!known_kind) {
    reason = "malformed manifest: \"kind\": expected opforge, onnxruntime or tensorrt, got " + shown(m.kind);
    return false;
  }
  if (!is_sha256_hex(m.sha256)) {
    reason = "malformed manifest: \"sha256\": expected 64 lowercase hex digits, got " + shown(m.sha256);
    return false;
  }
  return true;
}

}  // namespace

std::string manifest_path_for(const std::string& library_path) { return library_path + ".manifest.json"; }

std::string absolute_path(const std::string& path) {
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf)) return buf;
  return path;
}

int compare_versions(const std::string& a, const std::string& b) {
  std::istringstream sa(a), sb(b);
  for (;;) {
    std::string pa, pb;
    bool ha = static_cast<bool>(std::getline(sa, pa, '.'));
    bool hb = static_cast<bool>(std::getline(sb, pb, '.'));
    if (!ha && !hb) return 0;
    long va = ha ? std::strtol(pa.c_str(), nullptr, 10) : 0;
    long vb = hb ? std::strtol(pb.c_str(), nullptr, 10) : 0;
    if (va != vb) return va < vb ? -1 : 1;
  }
}

bool parse_manifest(const std::string& text, const std::string& manifest_path, Manifest& out, std::string& reason) {
  Json root;
  std::string error;
  if (!parse_json(text, root, error)) {
    reason = "malformed manifest: " + error;
    return false;
  }
  out = Manifest{};
  out.manifest_path = manifest_path;
  if (!read_fields(root, out, reason)) return false;
  const std::string suffix = ".manifest.json";
  const std::string actual_name = manifest_path.substr(manifest_path.rfind('/') + 1);
  if (actual_name != out.library + suffix) {
    const bool has_suffix = actual_name.size() > suffix.size() &&
                            actual_name.compare(actual_name.size() - suffix.size(), suffix.size(), suffix) == 0;
    reason = "malformed manifest: \"library\": expected " +
             shown(has_suffix ? actual_name.substr(0, actual_name.size() - suffix.size()) : actual_name) +
             " (the manifest's own file name without .manifest.json), got " + shown(out.library);
    return false;
  }
  out.library_path = dirname_of(manifest_path) + "/" + out.library;
  return true;
}

bool read_manifest(const std::string& manifest_path, Manifest& out, std::string& reason) {
  std::string text;
  int open_errno = 0;
  if (!read_regular_file(manifest_path, "manifest", kMaxManifestBytes, text, reason, &open_errno)) {
    if (open_errno == ENOENT) reason = "missing manifest " + manifest_path + " (expected next to the library)";
    return false;
  }
  return parse_manifest(text, absolute_path(manifest_path), out, reason);
}

bool check_not_world_writable(const std::string& path, std::string& reason) {
  for (const std::string& p : {path, dirname_of(path)}) {
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) { reason = "cannot stat " + p + ": " + std::strerror(errno); return false; }
    if (st.st_mode & S_IWOTH) {
      bool dir = S_ISDIR(st.st_mode);
      reason = std::string("world-writable ") + (dir ? "directory " : "file ") + p +
               " (anyone could replace the code; chmod o-w it)";
      return false;
    }
  }
  return true;
}

bool stat_file(const std::string& path, FileId& id, std::string& reason) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) { reason = "cannot stat " + path + ": " + std::strerror(errno); return false; }
  if (!S_ISREG(st.st_mode)) { reason = path + " is not a regular file"; return false; }
  id.dev = st.st_dev; id.ino = st.st_ino; id.size = static_cast<uint64_t>(st.st_size);
  id.mtime_ns = int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return true;
}

bool check_sha256(const Manifest& m, const std::string& path, FileId& hashed, std::string& reason) {
  std::string digest;
  return hash_library_file(path, hashed, digest, reason) && check_digest(m, digest, reason);
}

bool check_sdk_range(const Manifest& m, const std::string& runtime_version, std::string& reason) {
  bool low = compare_versions(runtime_version, m.sdk_min) < 0;
  bool high = !m.sdk_max.empty() && compare_versions(runtime_version, m.sdk_max) > 0;
  if (low || high) {
    reason = "sdk range [" + m.sdk_min + ", " + (m.sdk_max.empty() ? std::string("any") : m.sdk_max) +
             "] does not include runtime version " + runtime_version;
    return false;
  }
  return true;
}

bool check_opforge_compat(const Manifest& m, const char* host_version, std::string& reason) {
  if (m.api_version < OPFORGE_PLUGIN_API_VERSION_MIN || m.api_version > OPFORGE_PLUGIN_API_VERSION) {
    reason = "api_version " + std::to_string(m.api_version) + " out of range: this host supports [" +
             std::to_string(OPFORGE_PLUGIN_API_VERSION_MIN) + ", " + std::to_string(OPFORGE_PLUGIN_API_VERSION) + "]";
    return false;
  }
  return check_sdk_range(m, host_version, reason);
}

}  // namespace opforge::loader
