// Can a GPU of a given compute capability run a library built for a given arch list? Pure C++
// (no CUDA): the decision every CUDA library makes once per device before its first launch, so a
// GPU with no usable code gets a clear error instead of "no kernel image is available" later.
//
// CUDA's compatibility rules, per embedded code object:
//   SASS sm_XY   runs on X.Z for Z >= Y (same major only)
//   SASS sm_XYf  (family) runs on X.Z for Z >= Y
//   SASS sm_XYa  (arch-specific) runs on X.Y only
//   PTX compute_XY  is JIT-compiled by the driver on any X'.Y' >= X.Y
//   PTX compute_XYf runs on X.Z for Z >= Y; compute_XYa on X.Y only
// Arch lists are CMake style: "80;90a;100f" (major = n / 10, minor = n % 10).
#pragma once

#include <cctype>
#include <string>
#include <vector>

namespace opforge::kernels {

struct Capability {
  int major = 0;
  int minor = 0;
};

struct Arch {
  int major = 0;
  int minor = 0;
  char variant = 0;  // 0 (portable), 'a' (arch-specific) or 'f' (family-specific)
};

enum class ArchVerdict { kSass, kPtx, kNoImage };

inline bool is_separator(char c) { return c == ';' || c == ',' || c == ' ' || c == '_'; }

// "80;90a" -> {8.0, 9.0a}; ',', ' ' and '_' separate too. Returns false on a bad entry.
inline bool parse_arch_list(const std::string& text, std::vector<Arch>* out) {
  out->clear();
  size_t i = 0;
  while (i < text.size()) {
    if (is_separator(text[i])) { ++i; continue; }
    int number = 0, digits = 0;
    for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i, ++digits)
      number = number * 10 + (text[i] - '0');
    if (digits < 2 || digits > 4) return false;
    Arch arch{number / 10, number % 10, 0};
    if (i < text.size() && (text[i] == 'a' || text[i] == 'f')) arch.variant = text[i++];
    if (i < text.size() && !is_separator(text[i])) return false;
    out->push_back(arch);
  }
  return true;
}

inline bool sass_runs_on(const Arch& sass, Capability device) {
  if (sass.major != device.major) return false;
  return sass.variant == 'a' ? device.minor == sass.minor : device.minor >= sass.minor;
}

inline bool ptx_runs_on(const Arch& ptx, Capability device) {
  if (ptx.variant != 0) return sass_runs_on(ptx, device);  // a/f PTX: same rule as its SASS
  return device.major > ptx.major || (device.major == ptx.major && device.minor >= ptx.minor);
}

inline ArchVerdict arch_verdict(Capability device, const std::vector<Arch>& sass, const std::vector<Arch>& ptx) {
  for (const Arch& a : sass)
    if (sass_runs_on(a, device)) return ArchVerdict::kSass;
  for (const Arch& a : ptx)
    if (ptx_runs_on(a, device)) return ArchVerdict::kPtx;
  return ArchVerdict::kNoImage;
}

inline std::string arch_name(const char* prefix, const Arch& a) {
  std::string name = prefix + std::to_string(a.major * 10 + a.minor);
  if (a.variant) name += a.variant;
  return name;
}

inline std::string arch_names(const char* prefix, const std::vector<Arch>& archs) {
  if (archs.empty()) return "none";
  std::string names;
  for (const Arch& a : archs) names += (names.empty() ? "" : ", ") + arch_name(prefix, a);
  return names;
}

// "8.0;9.0" of the portable archs plus the device's, for the rebuild hint.
inline std::string arch_list_with(Capability device, const std::vector<Arch>& sass) {
  const std::string own = std::to_string(device.major) + "." + std::to_string(device.minor);
  std::string list;
  bool placed = false;
  for (const Arch& a : sass) {
    if (!placed && (a.major > device.major || (a.major == device.major && a.minor > device.minor))) {
      list += (list.empty() ? "" : ";") + own;
      placed = true;
    }
    list += (list.empty() ? "" : ";") + std::to_string(a.major) + "." + std::to_string(a.minor);
    if (a.variant) list += a.variant;
  }
  if (!placed) list += (list.empty() ? "" : ";") + own;
  return list;
}

// Empty when `device` can run this build (SASS or PTX); else the error naming the library, the
// device, what is embedded and what would serve the device.
inline std::string arch_error(const std::string& library, const std::string& device_name, Capability device,
                              const std::vector<Arch>& sass, const std::vector<Arch>& ptx) {
  if (arch_verdict(device, sass, ptx) != ArchVerdict::kNoImage) return "";
  const std::string cc = std::to_string(device.major) + "." + std::to_string(device.minor);
  const std::string sm = std::to_string(device.major * 10 + device.minor);
  return library + ": this GPU (" + (device_name.empty() ? "" : device_name + ", ") + "compute capability " + cc +
         ") cannot run this build: it embeds SASS for " + arch_names("sm_", sass) + " and PTX for " +
         arch_names("compute_", ptx) + ", none of which runs on " + cc +
         " (SASS sm_XY runs on X.Y and newer minors of major X; PTX compute_XY on X.Y and newer). "
         "Rebuild with " + cc + " in OPFORGE_CUDA_ARCHS (e.g. OPFORGE_CUDA_ARCHS=\"" + arch_list_with(device, sass) +
         "\") or install a variant built for sm_" + sm + ".";
}

}  // namespace opforge::kernels
