"""`python -m opforge_trt doctor [--library PATH]`: check the TensorRT plugin library the way
TensorRT will use it, and name the cause and the fix of each problem (PITFALLS.md, TensorRT rows):

- library not found, or not loadable (a dependency such as libcudart missing: ldd says which);
- `getCreators` not exported (`SymbolAddress for getCreators could not be loaded`): visibility or
  C++ name mangling; `setLoggerFinder` missing;
- the creators it registers: names, versions, namespace, fields — what an ONNX node or a
  serialized engine must match (`getPluginCreator could not find plugin X`);
- the manifest's sha256;
- and, where the `tensorrt` package imports, a real `load_library` into TensorRT's registry.

It never needs a GPU. The creators are read in a child process, so a broken library cannot take
the doctor down with it.
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from opforge_spec.doctor import Report

from . import LIBRARY_NAME, NAMESPACE, OPS, PLUGIN_VERSION

ENTRY_SYMBOL = "getCreators"
LOGGER_SYMBOL = "setLoggerFinder"
LOAD_HINT = ("load the library into TensorRT's plugin registry BEFORE parsing the ONNX model or "
             "deserializing the engine: Python `trt.get_plugin_registry().load_library(opforge_trt.library_path())` "
             "(or `opforge_trt.load_into()`), C++ `getPluginRegistry()->loadLibrary(path)`, trtexec "
             "`--dynamicPlugins=<path>` (and `--setPluginsToSerialize=<path>` to ship it with a version-compatible engine)")
_FIELD_TYPES = {0: "float16", 1: "float32", 2: "float64", 3: "int8", 4: "int16", 5: "int32", 6: "char", 7: "dims",
                8: "unknown", 9: "bfloat16", 10: "int64"}


# ---- reading the creators (runs in a child process) -------------------------------------------

class _InterfaceInfo(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_char_p), ("major", ctypes.c_int32), ("minor", ctypes.c_int32)]


class _PluginField(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("data", ctypes.c_void_p), ("type", ctypes.c_int32),
                ("length", ctypes.c_int32)]


class _FieldCollection(ctypes.Structure):
    _fields_ = [("nbFields", ctypes.c_int32), ("fields", ctypes.POINTER(_PluginField))]


# Itanium C++ ABI vtable slots of nvinfer1::IPluginCreatorV3One (NvInferRuntime.h, TensorRT 10):
# virtual functions in declaration order, the virtual destructor taking two slots (2, 3).
_SLOTS = {"getInterfaceInfo": 1, "getFieldNames": 5, "getPluginName": 6, "getPluginVersion": 7,
          "getPluginNamespace": 8}


def _call(obj: int, method: str, restype):
    vtable = ctypes.cast(obj, ctypes.POINTER(ctypes.POINTER(ctypes.c_void_p)))[0]
    return ctypes.CFUNCTYPE(restype, ctypes.c_void_p)(vtable[_SLOTS[method]])(obj)


def _fields(obj: int) -> list:
    collection = _call(obj, "getFieldNames", ctypes.POINTER(_FieldCollection))
    if not collection:
        return []
    out = []
    for i in range(collection.contents.nbFields):
        f = collection.contents.fields[i]
        default = None
        if f.data and f.length == 1 and f.type == 1:  # float32
            default = ctypes.cast(f.data, ctypes.POINTER(ctypes.c_float))[0]
        elif f.data and f.length == 1 and f.type == 5:  # int32: an int or enum attribute
            default = ctypes.cast(f.data, ctypes.POINTER(ctypes.c_int32))[0]
        out.append({"name": (f.name or b"").decode(), "type": _FIELD_TYPES.get(f.type, str(f.type)),
                    "length": f.length, "default": default})
    return out


def probe(library: str) -> dict:
    """dlopen the library (RTLD_NOW | RTLD_LOCAL, as TensorRT does) and read what getCreators gives."""
    try:
        handle = ctypes.CDLL(library, mode=getattr(ctypes, "RTLD_LOCAL", 0) | 2)  # 2 = RTLD_NOW
    except OSError as exc:
        return {"dlopen_error": str(exc)}
    result: dict[str, Any] = {"symbols": {s: hasattr(handle, s) for s in (ENTRY_SYMBOL, LOGGER_SYMBOL, "getPluginCreators")}}
    if not result["symbols"][ENTRY_SYMBOL]:
        return result
    get_creators = handle.getCreators
    get_creators.restype = ctypes.POINTER(ctypes.c_void_p)
    get_creators.argtypes = [ctypes.POINTER(ctypes.c_int32)]  # int32_t& is a pointer in the ABI
    count = ctypes.c_int32(-1)
    array = get_creators(ctypes.byref(count))
    creators = []
    for i in range(max(count.value, 0)):
        obj = array[i]
        info = _call(obj, "getInterfaceInfo", _InterfaceInfo)
        entry: dict[str, Any] = {"interface": f"{(info.kind or b'').decode()} {info.major}.{info.minor}"}
        if info.kind == b"PLUGIN CREATOR_V3ONE":
            entry.update(name=_call(obj, "getPluginName", ctypes.c_char_p).decode(),
                         version=_call(obj, "getPluginVersion", ctypes.c_char_p).decode(),
                         namespace=_call(obj, "getPluginNamespace", ctypes.c_char_p).decode(),
                         fields=_fields(obj))
        creators.append(entry)
    result.update(count=count.value, creators=creators)
    return result


def _probe_in_child(library: str) -> tuple[dict | None, str]:
    code = "import json, sys; from opforge_trt.doctor import probe; print(json.dumps(probe(sys.argv[1])))"
    done = subprocess.run([sys.executable, "-c", code, library], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        return None, f"exit status {done.returncode}: {done.stderr.strip()[-500:]}"
    return json.loads(done.stdout.strip().splitlines()[-1]), ""


# ---- the checks -----------------------------------------------------------------------------

def _default_library() -> str | None:
    from . import library_path

    try:
        return library_path()
    except FileNotFoundError:
        return None


def _missing_dependencies(library: str) -> list:
    if shutil.which("ldd") is None:
        return []
    out = subprocess.run(["ldd", library], capture_output=True, text=True).stdout
    return re.findall(r"^\s*(\S+) => not found", out, flags=re.M)


def _exports(library: str) -> list:
    if shutil.which("nm") is None:
        return []
    out = subprocess.run(["nm", "-D", "--defined-only", library], capture_output=True, text=True).stdout
    return [line.split()[-1] for line in out.splitlines() if line.split()]


def _check_loading(report: Report, library: str, result: dict) -> bool:
    error = result.get("dlopen_error")
    if error is None:
        report.ok("library", library)
        return True
    missing = _missing_dependencies(library)
    if missing:
        report.problem(
            "dependency-missing", f"{library} needs {', '.join(missing)}, which the dynamic loader cannot find",
            "install the CUDA runtime of the toolkit major the library was built with (libcudart.so.N: the "
            "CUDA toolkit, or `pip install nvidia-cuda-runtime` and its lib folder) and add its folder to "
            "LD_LIBRARY_PATH", error)
    else:
        report.problem("library-not-loadable", f"{library} cannot be loaded: {error}",
                       "rebuild the library for this machine (architecture, glibc) or reinstall the plugin")
    return False


def _check_symbols(report: Report, library: str, result: dict) -> bool:
    symbols = result["symbols"]
    exported = _exports(library)
    if not symbols[ENTRY_SYMBOL]:
        mangled = [s for s in exported if ENTRY_SYMBOL in s and s != ENTRY_SYMBOL]
        cause = (f"it exports the C++-mangled {mangled[0]}: declare it extern \"C\"" if mangled else
                 "declare it `extern \"C\"` with default visibility and list it in the linker version script")
        report.problem(
            "entry-symbol-missing",
            f"{library} does not export {ENTRY_SYMBOL}, the entry point TensorRT's loadLibrary looks up "
            f"(TensorRT says: SymbolAddress for getCreators could not be loaded)",
            f"{cause}; check with `nm -D --defined-only {Path(library).name}`",
            f"exported: {' '.join(exported) or 'nothing'}")
        return False
    others = [s for s in exported if s not in (ENTRY_SYMBOL, LOGGER_SYMBOL, "getPluginCreators")]
    report.ok("entry", f"{ENTRY_SYMBOL} exported" + (f" (also {len(others)} other symbols: {' '.join(others[:5])})"
                                                     if others else ""))
    if not symbols[LOGGER_SYMBOL]:
        report.problem("logger-finder-missing", f"{library} does not export {LOGGER_SYMBOL}",
                       "export `extern \"C\" void setLoggerFinder(nvinfer1::ILoggerFinder*)`: TensorRT requires it "
                       "of libraries it loads with loadLibrary, and the plugins log through it")
    return True


def _check_creators(report: Report, result: dict) -> None:
    creators = result.get("creators", [])
    report.facts["creators"] = creators
    for c in creators:
        if "name" not in c:
            report.problem("creator-not-v3", f"a creator has interface {c['interface']!r}, not IPluginCreatorV3One",
                           "build the plugins on IPluginV3 / IPluginCreatorV3One (TensorRT 10)")
            continue
        fields = ", ".join(f"{f['name']} ({f['type']}, default {f['default']:g})" if f["default"] is not None
                           else f"{f['name']} ({f['type']})" for f in c["fields"])
        report.ok("creator", f"{c['namespace']}::{c['name']} version {c['version']}; fields: {fields or 'none'}")
    found = {(c.get("name"), c.get("version"), c.get("namespace")): c for c in creators}
    for name, attrs in OPS.items():
        c = found.get((name, PLUGIN_VERSION, NAMESPACE))
        if c is None:
            have = ", ".join(f"{x.get('namespace')}::{x.get('name')} v{x.get('version')}" for x in creators) or "none"
            report.problem("creator-missing", f"no creator {NAMESPACE}::{name} version {PLUGIN_VERSION} (have: {have})",
                           f"ONNX nodes opforge::{name} and engines built with the plugin look it up by exactly this "
                           "name, version and namespace: rebuild/reinstall opforge-trt")
        else:
            _check_fields(report, name, attrs, [f["name"] for f in c["fields"]])


def _check_fields(report: Report, name: str, attrs: tuple, declared: list) -> None:
    for attr in attrs:
        if attr not in declared:
            report.problem("field-missing", f"{NAMESPACE}::{name} does not declare the field {attr!r}",
                           f"the ONNX parser maps the node attribute {attr!r} only onto a declared field")


def _check_manifest(report: Report, library: str) -> None:
    path = Path(library + ".manifest.json")
    if not path.is_file():
        report.ok("manifest", "none next to the library")
        return
    data = json.loads(path.read_text())
    digest = hashlib.sha256(Path(library).read_bytes()).hexdigest()
    if data.get("sha256") != digest:
        report.problem("manifest-mismatch", f"{path.name}: sha256 {data.get('sha256')} does not match the library ({digest})",
                       "the library changed after its manifest was written: reinstall the plugin")
    else:
        report.ok("manifest", f"{path.name}: sha256 matches; TensorRT {data['sdk']['min']}+ (api_version {data['api_version']})")


def _check_tensorrt(report: Report, library: str) -> None:
    try:
        import tensorrt as trt
    except (ImportError, OSError) as exc:  # absent, or the bindings without libnvinfer
        report.ok("tensorrt", f"not importable here ({str(exc).splitlines()[0]}); registry check skipped")
        return
    registry = trt.get_plugin_registry()
    registry.load_library(library)
    for name in OPS:
        if registry.get_creator(name, PLUGIN_VERSION, NAMESPACE) is None:
            report.problem("registry-missing", f"TensorRT {trt.__version__}: no creator {NAMESPACE}::{name} after load_library",
                           LOAD_HINT)
    report.ok("tensorrt", f"TensorRT {trt.__version__}: load_library registered {', '.join(OPS)}")


def diagnose(library: str | None = None, *, with_tensorrt: bool = True) -> Report:
    report = Report()
    library = library or _default_library()
    if library is None or not Path(library).is_file():
        report.problem("library-not-found", f"plugin library not found: {library or LIBRARY_NAME + ' (installed copy)'}",
                       "install the plugin (`pip install packages/trt_plugin` with OPFORGE_CUDA_HOME set) or pass "
                       "--library PATH; `python -m opforge_trt path` prints the installed one")
        return report
    result, crash = _probe_in_child(library)
    if result is None:
        report.problem("library-crashed", f"reading the creators of {library} crashed the process",
                       "the library's getCreators or a creator method is broken: rebuild it", crash)
        return report
    if _check_loading(report, library, result) and _check_symbols(report, library, result):
        _check_creators(report, result)
    _check_manifest(report, library)
    if with_tensorrt and not report.problems:
        _check_tensorrt(report, library)
    return report


def main(library: str | None = None) -> int:
    report = diagnose(library)
    hint = ("hint     'getPluginCreator could not find plugin' / 'Cannot deserialize plugin since "
            f"corresponding IPluginCreator not found': {LOAD_HINT}")
    print("\n".join(report.lines(f"opforge_trt doctor: {library or 'installed library'}",
                                 "loadable, creators registered", (hint,))))
    return report.exit_code()
