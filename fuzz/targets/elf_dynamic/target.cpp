// Fuzz target: bytes -> the loader host's ELF dynamic-section reader (read_dynamic_info in
// packages/loader/csrc/host/elf_dynamic.h), which reads a plugin's DT_NEEDED and DT_RUNPATH /
// DT_RPATH from its verified in-memory bytes before dlopen to resolve $ORIGIN dependencies. The
// bytes are a plugin file: anyone who ships a plugin controls them.
//
// Oracles beyond the sanitizers: no exception escapes; a refusal is one short printable line; an
// accepted object gives at most 1,024 DT_NEEDED names and strings of at most 64 KiB without NUL.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "elf_dynamic.h"

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "elf_dynamic target: %s\n", what);
  std::abort();
}

bool printable_line(const std::string& s) {
  for (unsigned char c : s)
    if (c < 0x20 || c >= 0x7f) return false;
  return true;
}

void check_string(const std::string& s) {
  if (s.size() > opforge::loader::elf_detail::kMaxStringBytes) fail("a string longer than the cap was accepted");
  if (s.find('\0') != std::string::npos) fail("a string holds a NUL byte");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  opforge::loader::DynamicInfo info;
  std::string reason;
  bool ok;
  try {
    ok = opforge::loader::read_dynamic_info(data, size, info, reason);
  } catch (...) {
    fail("an exception escaped read_dynamic_info");
  }
  if (!ok) {
    if (reason.empty() || reason.size() > 1000 || !printable_line(reason)) fail("a refusal without a short one-line reason");
    return 0;
  }
  if (info.needed.size() > opforge::loader::elf_detail::kMaxNeeded) fail("more DT_NEEDED entries than the cap");
  for (const std::string& name : info.needed) check_string(name);
  for (const std::string& entry : info.search_path) check_string(entry);
  if (info.has_runpath && !info.needed.empty() && info.search_path.empty()) fail("DT_RUNPATH accepted without its search path");
  return 0;
}
