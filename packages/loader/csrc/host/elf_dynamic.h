// What the host needs from a plugin's dynamic section before dlopen: its DT_NEEDED names and the
// DT_RUNPATH / DT_RPATH search list (image.cpp resolves the $ORIGIN entries of it). Read from the
// verified bytes in memory, never from the file again. Those bytes are outside input: every
// offset, size and string is bounds-checked, the counts are capped, nothing recurses.
// Header-only, so the fuzz target (fuzz/targets/elf_dynamic) compiles exactly this reader.
#pragma once
#include <elf.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace opforge::loader {

struct DynamicInfo {
  std::vector<std::string> needed;       // DT_NEEDED, in order
  std::vector<std::string> search_path;  // DT_RUNPATH split at ':' (else DT_RPATH), in order
  bool has_runpath = false;              // glibc: DT_RUNPATH is searched after LD_LIBRARY_PATH, DT_RPATH before
};

namespace elf_detail {

constexpr size_t kMaxNeeded = 1024;        // real libraries have tens
constexpr size_t kMaxStringBytes = 65536;  // a DT_NEEDED name or a whole RUNPATH

// Copies a T at offset off of data[0, size) (memcpy: the bytes carry no alignment promise).
template <typename T>
bool read_at(const unsigned char* data, size_t size, uint64_t off, T& out) {
  if (off > size || size - off < sizeof(T)) return false;
  std::memcpy(&out, data + off, sizeof(T));
  return true;
}

// File offset of virtual address addr: the PT_LOAD segment whose file bytes hold it.
inline bool file_offset_of(const std::vector<Elf64_Phdr>& loads, uint64_t addr, uint64_t& off, uint64_t& room) {
  for (const Elf64_Phdr& p : loads) {
    if (addr < p.p_vaddr || addr - p.p_vaddr >= p.p_filesz) continue;
    off = p.p_offset + (addr - p.p_vaddr);
    room = p.p_filesz - (addr - p.p_vaddr);
    return off >= p.p_offset;  // no wrap-around
  }
  return false;
}

// The NUL-terminated string at index of a string table [table, table + table_size) of data.
inline bool string_at(const unsigned char* data, uint64_t table, uint64_t table_size, uint64_t index,
                      std::string& out, std::string& reason) {
  if (index >= table_size) {
    reason = "a string index (" + std::to_string(index) + ") lies outside DT_STRTAB (" +
             std::to_string(table_size) + " bytes)";
    return false;
  }
  const size_t room = static_cast<size_t>(std::min<uint64_t>(table_size - index, kMaxStringBytes + 1));
  const void* end = std::memchr(data + table + index, 0, room);
  if (!end) {
    reason = "a string of DT_STRTAB is not NUL-terminated within " + std::to_string(kMaxStringBytes) + " bytes";
    return false;
  }
  out.assign(reinterpret_cast<const char*>(data + table + index),
             static_cast<const unsigned char*>(end) - (data + table + index));
  return true;
}

inline std::vector<std::string> split_search_path(const std::string& list) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t colon; (colon = list.find(':', start)) != std::string::npos; start = colon + 1)
    out.push_back(list.substr(start, colon - start));
  out.push_back(list.substr(start));
  return out;
}

inline bool is_elf64_of_this_host(const Elf64_Ehdr& h) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  const unsigned char data = ELFDATA2MSB;
#else
  const unsigned char data = ELFDATA2LSB;
#endif
  return std::memcmp(h.e_ident, ELFMAG, SELFMAG) == 0 && h.e_ident[EI_CLASS] == ELFCLASS64 &&
         h.e_ident[EI_DATA] == data;
}

#ifndef EM_LOONGARCH
#define EM_LOONGARCH 258
#endif

#if defined(__x86_64__)
constexpr unsigned kHostMachine = EM_X86_64;
#elif defined(__aarch64__)
constexpr unsigned kHostMachine = EM_AARCH64;
#elif defined(__powerpc64__)
constexpr unsigned kHostMachine = EM_PPC64;
#elif defined(__s390x__)
constexpr unsigned kHostMachine = EM_S390;
#elif defined(__riscv)
constexpr unsigned kHostMachine = EM_RISCV;
#elif defined(__loongarch64)
constexpr unsigned kHostMachine = EM_LOONGARCH;
#elif defined(__i386__)
constexpr unsigned kHostMachine = EM_386;
#elif defined(__arm__)
constexpr unsigned kHostMachine = EM_ARM;
#else
constexpr unsigned kHostMachine = EM_NONE;  // unknown here: the machine is left to dlopen
#endif
constexpr unsigned char kHostClass = sizeof(void*) == 8 ? ELFCLASS64 : ELFCLASS32;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
constexpr unsigned char kHostData = ELFDATA2MSB;
#else
constexpr unsigned char kHostData = ELFDATA2LSB;
#endif

inline std::string machine_name(unsigned machine) {
  switch (machine) {
    case EM_386: return "x86 (i386)";
    case EM_X86_64: return "x86-64";
    case EM_AARCH64: return "AArch64";
    case EM_ARM: return "ARM";
    case EM_PPC: return "PowerPC";
    case EM_PPC64: return "PowerPC64";
    case EM_S390: return "s390";
    case EM_RISCV: return "RISC-V";
    case EM_LOONGARCH: return "LoongArch";
    case EM_MIPS: return "MIPS";
    case EM_SPARCV9: return "SPARC V9";
    default: return "e_machine " + std::to_string(machine);
  }
}

inline std::string class_name(unsigned char elf_class) {
  if (elf_class == ELFCLASS32) return "32-bit";
  if (elf_class == ELFCLASS64) return "64-bit";
  return "EI_CLASS " + std::to_string(elf_class);
}

inline std::string byte_order_name(unsigned char data) {
  if (data == ELFDATA2LSB) return "little-endian";
  if (data == ELFDATA2MSB) return "big-endian";
  return "EI_DATA " + std::to_string(data);
}

}  // namespace elf_detail

// Whether the ELF header at the start of data[0, size) is of an object this host can map: its
// class, byte order and machine are the host's. dlopen skips an object of another machine as if
// the file were missing ("No such file or directory"); reason names what was expected and what
// was found. Bytes too short for e_machine or without the ELF magic give true: dlopen names that.
inline bool check_elf_header(const unsigned char* data, size_t size, std::string& reason) {
  using namespace elf_detail;
  if (size < EI_NIDENT + 4 || std::memcmp(data, ELFMAG, SELFMAG) != 0) return true;
  const unsigned char elf_class = data[EI_CLASS], order = data[EI_DATA];
  // e_machine sits at offset 18 in both classes, in the file's own byte order.
  const unsigned machine = order == ELFDATA2MSB ? unsigned(data[18]) << 8 | data[19] : unsigned(data[19]) << 8 | data[18];
  const std::string host = class_name(kHostClass) + " " + machine_name(kHostMachine);
  const std::string found = class_name(elf_class) + " " + machine_name(machine);
  const std::string rebuild = "; rebuild it for this host";
  if (elf_class != kHostClass) {
    reason = "wrong ELF class: expected a " + host + " library, found a " + found + " one (EI_CLASS " +
             std::to_string(elf_class) + ")" + rebuild;
    return false;
  }
  if (order != kHostData) {
    reason = "wrong byte order: expected " + byte_order_name(kHostData) + ", found " + byte_order_name(order) + " (" +
             found + ")" + rebuild;
    return false;
  }
  if (kHostMachine != EM_NONE && machine != kHostMachine) {
    reason = "built for another machine: expected " + machine_name(kHostMachine) + ", found " + machine_name(machine) +
             " (e_machine " + std::to_string(machine) + ")" + rebuild;
    return false;
  }
  return true;
}

// Fills out from the ELF64 object in data[0, size). Bytes that are not an ELF64 object of this
// host's byte order give true and nothing to resolve (dlopen then names the problem itself);
// a malformed program header table or dynamic section gives false with reason.
inline bool read_dynamic_info(const unsigned char* data, size_t size, DynamicInfo& out, std::string& reason) {
  using namespace elf_detail;
  out = DynamicInfo{};
  Elf64_Ehdr eh;
  if (!read_at(data, size, 0, eh) || !is_elf64_of_this_host(eh)) return true;
  if (eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum == PN_XNUM) {
    reason = "unsupported program header table (e_phentsize " + std::to_string(eh.e_phentsize) + ", e_phnum " +
             std::to_string(eh.e_phnum) + ")";
    return false;
  }
  std::vector<Elf64_Phdr> loads;
  Elf64_Phdr dynamic{};
  bool has_dynamic = false;
  for (uint64_t i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph;
    if (eh.e_phoff > size || !read_at(data, size, eh.e_phoff + i * sizeof(Elf64_Phdr), ph)) {
      reason = "program header " + std::to_string(i) + " lies outside the file";
      return false;
    }
    if (ph.p_type == PT_LOAD) loads.push_back(ph);
    if (ph.p_type == PT_DYNAMIC) { dynamic = ph; has_dynamic = true; }  // the last one, as glibc takes it
  }
  if (!has_dynamic) return true;  // no dynamic section: nothing needed
  if (dynamic.p_offset > size || dynamic.p_filesz > size - dynamic.p_offset) {
    reason = "PT_DYNAMIC (offset " + std::to_string(dynamic.p_offset) + ", " + std::to_string(dynamic.p_filesz) +
             " bytes) lies outside the file (" + std::to_string(size) + " bytes)";
    return false;
  }
  std::vector<uint64_t> needed;
  uint64_t strtab = 0, strsz = 0, runpath = 0, rpath = 0;
  bool has_strtab = false, has_strsz = false, has_rpath = false;
  const uint64_t entries = dynamic.p_filesz / sizeof(Elf64_Dyn);
  for (uint64_t i = 0; i < entries; ++i) {
    Elf64_Dyn d;
    read_at(data, size, dynamic.p_offset + i * sizeof(Elf64_Dyn), d);  // in bounds: checked above
    if (d.d_tag == DT_NULL) break;
    switch (d.d_tag) {
      case DT_NEEDED:
        if (needed.size() == kMaxNeeded) {
          reason = "more than " + std::to_string(kMaxNeeded) + " DT_NEEDED entries";
          return false;
        }
        needed.push_back(d.d_un.d_val);
        break;
      case DT_STRTAB: strtab = d.d_un.d_ptr; has_strtab = true; break;
      case DT_STRSZ: strsz = d.d_un.d_val; has_strsz = true; break;
      case DT_RUNPATH: runpath = d.d_un.d_val; out.has_runpath = true; break;
      case DT_RPATH: rpath = d.d_un.d_val; has_rpath = true; break;
      default: break;
    }
  }
  if (needed.empty()) return true;
  uint64_t table = 0, room = 0;
  if (!has_strtab || !has_strsz || !file_offset_of(loads, strtab, table, room) || table > size || strsz > room ||
      strsz > size - table) {
    reason = "DT_STRTAB / DT_STRSZ missing or outside the file's loaded segments";
    return false;
  }
  for (uint64_t index : needed) {
    std::string name;
    if (!string_at(data, table, strsz, index, name, reason)) return false;
    out.needed.push_back(std::move(name));
  }
  if (out.has_runpath || has_rpath) {  // glibc ignores DT_RPATH when DT_RUNPATH is present
    std::string list;
    if (!string_at(data, table, strsz, out.has_runpath ? runpath : rpath, list, reason)) return false;
    out.search_path = split_search_path(list);
  }
  return true;
}

}  // namespace opforge::loader
