// Fuzz target: bytes -> the loader's manifest reader (parse_manifest: nlohmann-json through the
// bounded SAX builder, then every field check), the function load/load_dir/sync/manifest_check
// run on a manifest file's bytes before anything else. The bytes come from a file anyone who can
// write the plugin directory controls, and they are read BEFORE the world-writable check.
//
// Oracles beyond the sanitizers: no exception escapes; a refusal is one printable line that
// starts with "malformed manifest: " and stays short; an accepted manifest satisfies every rule
// of the format (README "Manifest"), and its version checks run without incident.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "manifest.h"

namespace {

using opforge::loader::Manifest;

constexpr const char* kManifestPath = "/plugins/libops_fuzz.so.1.manifest.json";
constexpr size_t kMaxReason = 4096;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "manifest target: %s\n", what);
  std::abort();
}

bool printable_line(const std::string& s) {
  for (unsigned char c : s)
    if (c < 0x20 || c >= 0x7f) return false;
  return true;
}

bool all_of(const std::string& s, const char* allowed_extra, bool digits_only) {
  if (s.empty()) return false;
  for (char c : s) {
    const bool digit = c >= '0' && c <= '9';
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (!(digit || (!digits_only && alpha) || (allowed_extra && std::strchr(allowed_extra, c)))) return false;
  }
  return true;
}

void check_refusal(const std::string& reason) {
  if (reason.rfind("malformed manifest: ", 0) != 0) fail("a refusal that does not say \"malformed manifest: \"");
  if (reason.size() > kMaxReason) fail("a refusal message longer than 4 KiB");
  if (!printable_line(reason)) fail("a refusal message with a raw control or non-ASCII byte");
}

void check_accepted(const Manifest& m) {
  if (m.library != "libops_fuzz.so.1" || m.library_path != "/plugins/libops_fuzz.so.1") fail("library accepted under another name");
  if (m.name.size() > 128 || !all_of(m.name, "_.-", false)) fail("name outside [A-Za-z0-9_.-]{1,128}");
  if (m.version.size() > 64 || !all_of(m.version.substr(0, m.version.find_first_of("-+")), ".", true)) fail("version not N.N.N[-+...]");
  if (m.kind != "opforge" && m.kind != "onnxruntime" && m.kind != "tensorrt") fail("unknown kind accepted");
  if (m.sha256.size() != 64 || !all_of(m.sha256, nullptr, false)) fail("sha256 not 64 hex digits");
  if (m.sdk_min.size() > 64 || !all_of(m.sdk_min, ".", true)) fail("sdk.min not dotted numbers");
  if (m.ops.empty()) fail("no ops accepted");
  for (const auto& op : m.ops)
    if (op.version < 1 || op.version > 4294967295LL || op.name.empty() || op.name.size() > 128) fail("op out of range");
  std::string reason;
  opforge::loader::check_opforge_compat(m, "0.1.0", reason);
  opforge::loader::check_sdk_range(m, m.sdk_min, reason);
  if (!m.sdk_max.empty() && opforge::loader::compare_versions(m.sdk_min, m.sdk_max) > 0) fail("sdk min above max accepted");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  Manifest m;
  std::string reason;
  if (opforge::loader::parse_manifest(text, kManifestPath, m, reason)) check_accepted(m);
  else check_refusal(reason);
  return 0;
}
