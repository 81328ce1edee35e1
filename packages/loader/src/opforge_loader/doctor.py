"""`opforge-loader doctor`: seed 000 §5.5 and seed 004 §5.4 as automated checks.

Each finding names what was seen, the likely cause and the fix. Uses binutils (readelf, nm,
c++filt), ldd and, when present, cuobjdump."""
from __future__ import annotations

import json
import os
import re
import shutil
import stat
import struct
import subprocess
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Literal

from . import _capi, isolation, manifests
from .errors import OpforgeError

ENTRY_POINTS = {
    "opforge": ({"opforge_plugin_entry"}, {"opforge_plugin_entry"}),
    "onnxruntime": ({"RegisterCustomOps"}, {"RegisterCustomOps", "RegisterCustomOpsAltName"}),
    "tensorrt": ({"getCreators"}, {"getCreators", "getPluginCreators", "setLoggerFinder"}),
}
_LINKER_SYMBOLS = {"_init", "_fini", "_edata", "_end", "__bss_start"}


@dataclass
class Finding:
    check: str
    status: str  # ok | info | warn | error
    message: str
    cause: str = ""
    fix: str = ""


@dataclass
class Symbol:
    name: str
    type: str
    bind: str
    visibility: str
    defined: bool


def _run(cmd: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def read_dynamic(path: str) -> tuple[str | None, list[str], list[str]]:
    """(SONAME, NEEDED, RUNPATH/RPATH) from the dynamic section."""
    out = _run(["readelf", "-dW", path]).stdout
    soname = next(iter(re.findall(r"\(SONAME\).*\[(.*)\]", out)), None)
    needed = re.findall(r"\(NEEDED\).*\[(.*)\]", out)
    runpath = re.findall(r"\((?:RUNPATH|RPATH)\).*\[(.*)\]", out)
    return soname, needed, runpath


def read_dynsyms(path: str) -> list[Symbol]:
    syms = []
    for line in _run(["readelf", "--dyn-syms", "-W", path]).stdout.splitlines():
        parts = line.split()
        if len(parts) < 8 or not parts[0].rstrip(":").isdigit():
            continue
        _num, _value, _size, typ, bind, vis, ndx, name = parts[:8]
        name = name.split("@")[0]
        if not name:
            continue
        syms.append(Symbol(name, typ, bind, vis, ndx != "UND"))
    return syms


def exported(syms: list[Symbol]) -> set[str]:
    return {s.name for s in syms if s.defined and s.bind in ("GLOBAL", "WEAK") and s.type not in ("NOTYPE", "SECTION", "FILE")
            and s.visibility in ("DEFAULT", "PROTECTED") and s.name not in _LINKER_SYMBOLS}


def demangle(names: list[str]) -> list[str]:
    if not names or not shutil.which("c++filt"):
        return list(names)
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()
    return out if len(out) == len(names) else list(names)


def ldd(path: str) -> tuple[dict[str, str], list[str]]:
    """(resolved NEEDED name -> path, names not found)."""
    resolved, missing = {}, []
    proc = _run(["ldd", path])
    for line in proc.stdout.splitlines():
        m = re.match(r"\s*(\S+) => (not found|(\S+))", line)
        interpreter = re.match(r"\s*(/\S+) \(0x", line)  # ld.so: a path, no "=>" (provides __tls_get_addr)
        if interpreter:
            resolved[os.path.basename(interpreter.group(1))] = interpreter.group(1)
        if not m:
            continue
        if m.group(2) == "not found":
            missing.append(m.group(1))
        else:
            resolved[m.group(1)] = m.group(3)
    return resolved, missing


@cache
def defined_in(lib_path: str) -> frozenset[str]:
    return frozenset(exported(read_dynsyms(lib_path)) | {s.name for s in read_dynsyms(lib_path) if s.defined})


def guess_kind(exports: set[str]) -> str | None:
    for kind, (required, _allowed) in ENTRY_POINTS.items():
        if required & exports:
            return kind
    return None


# --- CUDA device code ---------------------------------------------------------------------------

_FATBIN_MAGIC = 0xBA55ED50


def _section_bytes(path: str, section: str) -> bytes | None:
    out = _run(["readelf", "-SW", path]).stdout
    for line in out.splitlines():
        m = re.match(r"\s*\[\s*\d+\]\s+(\S+)\s+\S+\s+[0-9a-f]+\s+([0-9a-f]+)\s+([0-9a-f]+)", line)
        if m and m.group(1) == section:
            with open(path, "rb") as f:
                f.seek(int(m.group(2), 16))
                return f.read(int(m.group(3), 16))
    return None


def fatbin_archs(blob: bytes) -> tuple[set[int], set[int]]:
    """(SASS archs, PTX archs) from an .nv_fatbin section: fatbin header, then entries with
    kind (1 PTX, 2 ELF) and the SM number."""
    sass: set[int] = set()
    ptx: set[int] = set()
    off = 0
    while off + 16 <= len(blob):
        magic, _ver, hsize, fsize = struct.unpack_from("<IHHQ", blob, off)
        if magic != _FATBIN_MAGIC:
            off += 8  # blobs are 8-byte aligned
            continue
        entry, end = off + hsize, off + hsize + fsize
        while entry + 32 <= end:
            kind, _u, ehsize, esize = struct.unpack_from("<HHIQ", blob, entry)
            arch = struct.unpack_from("<I", blob, entry + 28)[0]
            (sass if kind == 2 else ptx).add(arch)
            if ehsize == 0:
                break
            entry += ehsize + esize
        off = end
    return sass, ptx


def cuda_archs(path: str) -> tuple[set[int], set[int]] | None:
    blob = _section_bytes(path, ".nv_fatbin")
    if blob is None:
        return None
    homes = [os.environ.get(v) for v in ("OPFORGE_CUDA_HOME", "CUDA_HOME")]
    candidates = [os.path.join(h, "bin", "cuobjdump") for h in homes if h] + [shutil.which("cuobjdump") or ""]
    cuobjdump = next((c for c in candidates if c and os.path.exists(c)), None)
    if cuobjdump:
        elf = _run([cuobjdump, "--list-elf", path]).stdout
        ptx = _run([cuobjdump, "--list-ptx", path]).stdout
        return ({int(a) for a in re.findall(r"sm_(\d+)", elf)}, {int(a) for a in re.findall(r"sm_(\d+)", ptx)})
    return fatbin_archs(blob)


def parse_arch_list(spec: str) -> set[int]:
    """TORCH_CUDA_ARCH_LIST syntax ("8.0;9.0", "8.0 9.0+PTX") or SM numbers ("80,90")."""
    out = set()
    for word in re.split(r"[;,\s]+", spec.strip()):
        item = word.replace("+PTX", "").replace("sm_", "")
        if not item:
            continue
        out.add(int(float(item) * 10) if "." in item else int(item))
    return out


# --- the checks ---------------------------------------------------------------------------------

def _check_file(path: str) -> list[Finding]:
    p = Path(path)
    if not p.is_file():
        return [Finding("file", "error", f"{path} does not exist or is not a file", "wrong path", "pass the library file")]
    with open(path, "rb") as f:
        if f.read(4) != b"\x7fELF":
            return [Finding("file", "error", f"{path} is not an ELF shared library", "wrong file", "pass the .so file")]
    found = []
    for target in (p, p.parent):
        if target.stat().st_mode & stat.S_IWOTH:
            found.append(Finding("permissions", "error", f"{target} is world-writable",
                                 "anyone on the machine can replace the code the host will run",
                                 f"chmod o-w {target}"))
    if not found:
        found.append(Finding("permissions", "ok", "file and directory are not world-writable"))
    return found


def _check_soname(path: str, soname: str | None) -> Finding:
    name = Path(path).name
    if not soname:
        return Finding("soname", "error", "no SONAME", "linked without -soname",
                       f"link with -Wl,-soname,{name} (CMake: SOVERSION) or patchelf --set-soname {name}")
    if soname != name:
        return Finding("soname", "warn", f"SONAME {soname} differs from the file name {name}",
                       "the file was renamed or SOVERSION changed",
                       f"name the file {soname} (or ship it as a symlink target of that name)")
    if not re.search(r"\.so\.\d+$", soname):
        return Finding("soname", "warn", f"SONAME {soname} carries no ABI major", "no SOVERSION",
                       "use lib<name>.so.<major>")
    return Finding("soname", "ok", f"SONAME {soname} matches the file name")


def _check_exports(kind: str | None, exports: set[str]) -> list[Finding]:
    if kind is None:
        return [Finding("entry", "error", "no known entry point exported (opforge_plugin_entry, RegisterCustomOps, getCreators)",
                        "entry not exported: -fvisibility=hidden without OPFORGE_PLUGIN_EXPORT / extern \"C\", or dropped by the version script",
                        "declare the entry extern \"C\" with default visibility and list it under global: in the version script; check with nm -D")]
    required, allowed = ENTRY_POINTS[kind]
    found = []
    missing = sorted(required - exports)
    if missing:
        found.append(Finding("entry", "error", f"entry symbol {', '.join(missing)} not exported (kind {kind})",
                             "hidden by -fvisibility=hidden, C++ name mangling (missing extern \"C\"), or not in the version script",
                             "export it with extern \"C\" and default visibility; verify with `nm -D --defined-only`"))
    else:
        found.append(Finding("entry", "ok", f"entry symbol {', '.join(sorted(required))} exported (kind {kind})"))
    leaked = sorted(exports - allowed)
    if leaked:
        shown = demangle(leaked[:12])
        found.append(Finding("exports", "error" if kind == "opforge" else "warn",
                             f"{len(leaked)} symbol(s) exported beyond the entry points: {', '.join(shown)}" + (" ..." if len(leaked) > 12 else ""),
                             "default visibility: internal helpers become global and collide with other plugins' helpers (seed 000 §5.2)",
                             "compile with -fvisibility=hidden -fvisibility-inlines-hidden, put helpers in an anonymous namespace, "
                             "and link with a version script exporting only the entry points"))
    else:
        found.append(Finding("exports", "ok", "nothing exported beyond the entry points"))
    return found


def _undefined_hint(name: str, pretty: str) -> tuple[str, str]:
    if name == "OrtGetApiBase":
        return ("the library calls OrtGetApiBase directly instead of taking the API from RegisterCustomOps' OrtApiBase",
                "define ORT_API_MANUAL_INIT and call Ort::InitApi(api_base->GetApi(MIN)) in RegisterCustomOps")
    if "__cxx11" in name:
        return ("CXX11 ABI mismatch: built with _GLIBCXX_USE_CXX11_ABI different from the library that should provide it",
                "rebuild with the same _GLIBCXX_USE_CXX11_ABI as the runtime (torch: torch._C._GLIBCXX_USE_CXX11_ABI)")
    if pretty.startswith(("c10::", "at::", "torch::")):
        return ("references libtorch that is not among its NEEDED libraries, or was built for another torch",
                "rebuild against the torch that runs it; link libtorch/libc10 explicitly")
    return ("references a symbol no NEEDED library provides: a private host symbol or a library missing from the link line",
            "link the library that defines it (-l...), or stop using host-private headers; build with -Wl,--no-undefined to catch it at link time")


def _check_undefined(syms: list[Symbol], resolved: dict[str, str], missing_deps: list[str]) -> list[Finding]:
    undefined = sorted({s.name for s in syms if not s.defined and s.bind == "GLOBAL"})
    provided: set[str] = set()
    for dep in resolved.values():
        provided |= defined_in(dep)
    unresolved = [n for n in undefined if n not in provided]
    if not unresolved:
        return [Finding("undefined", "ok", f"all {len(undefined)} undefined symbols are provided by its NEEDED libraries")]
    if missing_deps:
        return [Finding("undefined", "warn", f"{len(unresolved)} undefined symbol(s) not checked: dependencies are missing",
                        "see missing-dependencies", "fix the missing dependencies first")]
    pretty = demangle(unresolved)
    cause, fix = _undefined_hint(unresolved[0], pretty[0])
    shown = ", ".join(pretty[:8]) + (" ..." if len(pretty) > 8 else "")
    return [Finding("undefined", "error", f"{len(unresolved)} undefined symbol(s) not provided by any NEEDED library: {shown}",
                    cause, fix)]


def _check_cxx11(syms: list[Symbol], expect: int | None) -> Finding:
    names = [s.name for s in syms if "__cxx11" in s.name]
    uses_new = bool(names)
    if expect is not None and uses_new != bool(expect):
        want = "new (=1)" if expect else "old (=0)"
        return Finding("cxx11-abi", "error",
                       f"library uses the {'new' if uses_new else 'old'} libstdc++ ABI, expected {want}",
                       "_GLIBCXX_USE_CXX11_ABI differs from the runtime's: `undefined symbol ...__cxx11...` at load",
                       f"rebuild with -D_GLIBCXX_USE_CXX11_ABI={expect}")
    if uses_new:
        return Finding("cxx11-abi", "info", f"{len(names)} symbol(s) use the CXX11 libstdc++ ABI (e.g. {demangle(names[:1])[0]})",
                       "std::string / std::list in symbols", "match _GLIBCXX_USE_CXX11_ABI with any C++ library it shares these types with")
    return Finding("cxx11-abi", "ok", "no __cxx11 symbols (no ABI-sensitive std:: types in its dynamic symbols)")


def _check_cuda(path: str, require: set[int]) -> Finding:
    archs = cuda_archs(path)
    if archs is None:
        if require:
            return Finding("cuda-archs", "error", f"no CUDA device code embedded, required sm_{', sm_'.join(map(str, sorted(require)))}",
                           "built without CUDA (OPFORGE_CUDA_HOME unset) or device code in another library",
                           "rebuild with OPFORGE_CUDA_HOME and OPFORGE_CUDA_ARCHS set")
        return Finding("cuda-archs", "info", "no CUDA device code embedded (CPU-only library)")
    sass, ptx = archs
    text = f"SASS sm_{', sm_'.join(map(str, sorted(sass))) or '-'}; PTX {', '.join('compute_' + str(a) for a in sorted(ptx)) or '-'}"
    missing = sorted(a for a in require if a not in sass)
    if not missing:
        return Finding("cuda-archs", "ok", f"embedded {text}")
    jit = [a for a in missing if any(p <= a for p in ptx)]
    hard = [a for a in missing if a not in jit]
    if hard:
        return Finding("cuda-archs", "error", f"embedded {text}; missing sm_{', sm_'.join(map(str, hard))}",
                       "TORCH_CUDA_ARCH_LIST / CMAKE_CUDA_ARCHITECTURES missed the device's SM: 'no kernel image is available for execution on the device'",
                       f"rebuild with OPFORGE_CUDA_ARCHS including {';'.join(f'{a // 10}.{a % 10}' for a in hard)}")
    return Finding("cuda-archs", "warn", f"embedded {text}; sm_{', sm_'.join(map(str, jit))} only through PTX JIT",
                   "no SASS for the device: first launch JIT-compiles (slow start, driver-dependent)",
                   "add the arch to OPFORGE_CUDA_ARCHS")


def _check_manifest(path: str, kind: str | None) -> Finding:
    mpath = path + manifests.SUFFIX
    if not os.path.lexists(mpath):
        status = "error" if kind == "opforge" else "warn"
        return Finding("manifest", status, f"no manifest {Path(mpath).name} next to the library",
                       "the host reads the manifest before dlopen and refuses libraries without one",
                       "generate it at build time (opforge_add_plugin does) with the library's sha256")
    from .registry import check_manifest

    try:
        manifests.load(mpath)  # Python's reading first: never hands a FIFO or device to the host
        check_manifest(mpath)
    except OpforgeError as e:
        return Finding("manifest", "error", str(e), "manifest does not match the library or the host",
                       "rebuild (the build regenerates the manifest) or fix the field named")
    return Finding("manifest", "ok", f"{Path(mpath).name} valid and sha256 matches")


def _check_isolated(path: str, kind: str | None, timeout: float) -> Finding:
    max_api = _capi.lib().opforge_loader_api_version() if kind == "opforge" else None
    probe = isolation.run_isolated(path, kind, timeout, max_api)
    if probe.outcome == "timeout":
        return Finding("isolated", "error", f"{path} {isolation.hang_text(probe, timeout)}",
                       "a blocking static initializer, entry or init hook", "make init cheap; defer work to create()")
    if probe.outcome == "crashed":
        return Finding("isolated", "error", isolation.crash_text(probe),
                       "the library crashes while loading or initializing: it would take the host down",
                       "run it under gdb/ASan; check static constructors and the init hook")
    if probe.outcome == "failed":
        return Finding("isolated", "error", f"probe failed after phase '{probe.phase}': {probe.detail}",
                       "load or init failed", "see the message")
    return Finding("isolated", "ok", f"loaded in a child process: {probe.phase}")


# e_machine values (<elf.h>) of the machines a plugin is commonly built for.
_MACHINES = {3: "x86 (i386)", 8: "MIPS", 20: "PowerPC", 21: "PowerPC64", 22: "s390", 40: "ARM", 43: "SPARC V9",
             62: "x86-64", 183: "AArch64", 243: "RISC-V", 258: "LoongArch"}
_CLASSES = {1: "32-bit", 2: "64-bit"}


def _elf_target(header: bytes) -> tuple[str, str]:
    """(class, machine) named from an ELF header's first 20 bytes."""
    byteorder: Literal["big", "little"] = "big" if header[5] == 2 else "little"
    machine = int.from_bytes(header[18:20], byteorder)
    return (_CLASSES.get(header[4], f"EI_CLASS {header[4]}"),
            _MACHINES.get(machine, f"e_machine {machine}"))


@cache
def _host_target() -> tuple[str, str]:
    with open("/proc/self/exe", "rb") as f:  # the process that would dlopen the library
        return _elf_target(f.read(20))


def _check_machine(path: str) -> Finding:
    with open(path, "rb") as f:
        header = f.read(20)
    if len(header) < 20:
        return Finding("machine", "error", f"{path} is too short for an ELF header", "truncated file", "rebuild it")
    (want_class, want_machine), (got_class, got_machine) = _host_target(), _elf_target(header)
    fix = f"rebuild it as a {want_class} {want_machine} library"
    if got_class != want_class:
        return Finding("machine", "error", f"wrong ELF class: expected {want_class} {want_machine}, found {got_class} {got_machine}",
                       "built for another word size (-m32 / -m64) or another platform: dlopen cannot map it", fix)
    if got_machine != want_machine:
        return Finding("machine", "error", f"built for another machine: expected {want_machine}, found {got_machine}",
                       "cross-compiled, or taken from another platform's package: dlopen skips it as 'No such file'", fix)
    return Finding("machine", "ok", f"{got_class} {got_machine}, as this host")


def diagnose(path: str, *, kind: str | None = None, require_archs: set[int] | None = None,
             cxx11_abi: int | None = None, isolated: bool = False,
             timeout: float = isolation.DEFAULT_TIMEOUT) -> list[Finding]:
    path = str(Path(path).resolve())
    findings = _check_file(path)
    if any(f.status == "error" and f.check == "file" for f in findings):
        return findings
    findings.append(_check_machine(path))
    if findings[-1].status == "error":
        return findings  # readelf, ldd and the probe would only add noise about a foreign object
    if kind is None and os.path.lexists(path + manifests.SUFFIX):
        try:
            kind = manifests.load(path + manifests.SUFFIX).kind
        except OpforgeError:
            kind = None  # the manifest check reports why
    soname, _needed, _runpath = read_dynamic(path)
    syms = read_dynsyms(path)
    exports = exported(syms)
    kind = kind if kind in ENTRY_POINTS else guess_kind(exports)
    resolved, missing = ldd(path)
    findings.append(_check_soname(path, soname))
    findings += _check_exports(kind, exports)
    if missing:
        findings.append(Finding("dependencies", "error", f"missing dependencies: {', '.join(missing)}",
                                "ldd cannot find them: not installed, or not on the loader path (RUNPATH / LD_LIBRARY_PATH)",
                                "install the runtime that provides them, or fix RUNPATH ($ORIGIN) / LD_LIBRARY_PATH"))
    else:
        findings.append(Finding("dependencies", "ok", f"all {len(resolved)} dependencies found"))
    findings += _check_undefined(syms, resolved, missing)
    findings.append(_check_cxx11(syms, cxx11_abi))
    findings.append(_check_cuda(path, require_archs or set()))
    findings.append(_check_manifest(path, kind))
    if isolated:
        findings.append(_check_isolated(path, kind, timeout))
    return findings


def libraries_in(path: str) -> list[str]:
    p = Path(path)
    if p.is_file():
        return [str(p)]
    libs = {str(manifests.library_of(m)) for m in manifests.find_manifests(p)}
    libs |= {str(f) for f in p.rglob("lib*.so*") if f.is_file() and not f.is_symlink() and not f.name.endswith(".json")}
    return sorted(libs)


def to_json(results: dict[str, list[Finding]]) -> str:
    return json.dumps({lib: [asdict(f) for f in fs] for lib, fs in results.items()}, indent=2)


_MARK = {"ok": "ok  ", "info": "info", "warn": "WARN", "error": "FAIL"}


def render(results: dict[str, list[Finding]]) -> str:
    lines = []
    for lib, findings in results.items():
        lines.append(lib)
        for f in findings:
            lines.append(f"  [{_MARK[f.status]}] {f.check:<13} {f.message}")
            if f.status in ("warn", "error"):
                if f.cause:
                    lines.append(f"  {'':6} {'':13} cause: {f.cause}")
                if f.fix:
                    lines.append(f"  {'':6} {'':13} fix:   {f.fix}")
        errors = sum(f.status == "error" for f in findings)
        lines.append(f"  => {errors} error(s), {sum(f.status == 'warn' for f in findings)} warning(s)")
    return "\n".join(lines)
