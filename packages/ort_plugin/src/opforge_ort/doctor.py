"""`python -m opforge_ort doctor MODEL.onnx`: load a model with the opforge custom-op library and,
when that fails, name the cause and the fix.

The causes are the ones users of ORT custom-op libraries hit (seed 003 section 7.3, seed 004):
library not found or not loadable, entry symbol missing, runtime older than the library's minimum
API, domain or domain-version mismatch, op not in the domain, element type not supported, bad
attribute. Each problem has a stable code, printed and returned by `diagnose()`.
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import re
import shutil
import subprocess
from pathlib import Path

from opforge_spec.doctor import Report

from . import ATTRIBUTES, DOMAIN, DOMAIN_VERSION, LIBRARY_NAME, OPS

ENTRY_SYMBOL = "RegisterCustomOps"
DEFAULT_MIN_API = 17
_CPU_TYPES = {"FLOAT": "float32", "DOUBLE": "float64", "BFLOAT16": "bfloat16"}
_CUDA_TYPES = {"FLOAT": "float32", "FLOAT16": "float16"}


# ---- the library -----------------------------------------------------------------------------

def _default_library() -> str | None:
    from . import library_path

    try:
        return library_path()
    except FileNotFoundError:
        return None


def _check_library(report: Report, library: str | None) -> bool:
    """True when the library loads and exports the entry symbol."""
    if library is None or not Path(library).is_file():
        report.problem(
            "library-not-found", f"custom-op library not found: {library or LIBRARY_NAME + ' (installed copy)'}",
            "install the plugin (`pip install opforge-ort`, or `pip install packages/ort_plugin` from the "
            "repository) or pass --library PATH; `python -m opforge_ort path` prints the installed one")
        return False
    try:
        handle = ctypes.CDLL(library, mode=getattr(ctypes, "RTLD_LOCAL", 0))
    except OSError as exc:
        text = str(exc)
        missing = re.search(r"([\w.+-]+\.so[\w.]*): cannot open shared object file", text)
        if missing and Path(missing.group(1)).name != Path(library).name:
            report.problem(
                "dependency-missing", f"{library} needs {missing.group(1)}, which the dynamic loader cannot find",
                f"install the runtime that provides {missing.group(1)} (a CUDA build needs the CUDA runtime of "
                "its toolkit's major version) or add its folder to LD_LIBRARY_PATH", text)
        else:
            report.problem("library-not-loadable", f"{library} cannot be loaded: {text}",
                           "rebuild the library for this machine (architecture, glibc) or reinstall the plugin")
        return False
    report.ok("library", library)
    try:
        getattr(handle, ENTRY_SYMBOL)
    except AttributeError:
        report.problem(
            "entry-symbol-missing", f"{library} does not export {ENTRY_SYMBOL}, the entry point ONNX Runtime calls",
            f"declare it `extern \"C\"` with default visibility and list it in the linker version script; "
            f"check with `nm -D --defined-only {Path(library).name}`", _exports(library))
        return False
    report.ok("entry", f"{ENTRY_SYMBOL} exported" + _extra_exports(library))
    return True


def _exports(library: str) -> str:
    if shutil.which("nm") is None:
        return ""
    out = subprocess.run(["nm", "-D", "--defined-only", library], capture_output=True, text=True)
    return f"nm -D --defined-only: {' '.join(line.split()[-1] for line in out.stdout.splitlines()) or 'nothing'}"


def _extra_exports(library: str) -> str:
    text = _exports(library)
    names = text.split(": ", 1)[1].split() if text else []
    others = [n for n in names if n != ENTRY_SYMBOL]
    return f" (also exports {len(others)} other symbols: {' '.join(others[:5])})" if others else ""


def _manifest(report: Report, library: str) -> int:
    """The library's minimum ORT API from its manifest; checks the manifest's sha256 on the way."""
    path = Path(library + ".manifest.json")
    if not path.is_file():
        report.ok("manifest", f"none next to the library; assuming ORT API {DEFAULT_MIN_API}")
        return DEFAULT_MIN_API
    data = json.loads(path.read_text())
    digest = hashlib.sha256(Path(library).read_bytes()).hexdigest()
    if data.get("sha256") != digest:
        report.problem("manifest-mismatch", f"{path.name}: sha256 {data.get('sha256')} does not match the library ({digest})",
                       "the library changed after its manifest was written: reinstall the plugin")
    else:
        report.ok("manifest", f"{path.name}: sha256 matches; ORT API {data['api_version']}, sdk {data['sdk']}")
    return int(data.get("api_version", DEFAULT_MIN_API))


# ---- the runtime -----------------------------------------------------------------------------

def _check_runtime(report: Report, min_api: int):
    try:
        import onnxruntime
    except ImportError as exc:
        report.problem("onnxruntime-missing", f"onnxruntime cannot be imported: {exc}",
                       f"pip install 'onnxruntime>=1.{min_api}' (or onnxruntime-gpu)")
        return None
    version = onnxruntime.__version__
    major, minor = (int(p) for p in re.findall(r"\d+", version)[:2])
    if (major, minor) < (1, min_api):
        report.problem("ort-too-old",
                       f"onnxruntime {version} is older than the library's minimum ORT API {min_api} (ONNX Runtime 1.{min_api})",
                       f"pip install 'onnxruntime>=1.{min_api}'")
    else:
        report.ok("runtime", f"onnxruntime {version} (library needs ORT API >= {min_api})")
    return onnxruntime


# ---- the model -------------------------------------------------------------------------------

def _check_model(report: Report, model_path: str, provider: str) -> None:
    try:
        import onnx
    except ImportError:
        report.ok("model", "onnx not installed: static model checks skipped")
        return
    model = onnx.load(model_path)
    imports = {o.domain: o.version for o in model.opset_import}
    nodes = [n for n in model.graph.node if n.domain == DOMAIN]
    near = [n for n in model.graph.node if n.domain != DOMAIN and DOMAIN in n.domain.lower()]
    for n in near:
        report.problem("domain-mismatch", f"node {n.name!r} ({n.op_type}) is in domain {n.domain!r}, not {DOMAIN!r}",
                       f"the domain is case-sensitive and exact: use domain={DOMAIN!r} on the node and in opset_import")
    if nodes and DOMAIN not in imports:
        report.problem("domain-version-mismatch", f"the model has {DOMAIN} nodes but no opset_import for domain {DOMAIN!r}",
                       f"export with custom_opsets={{{DOMAIN!r}: {DOMAIN_VERSION}}} (or add "
                       f"onnx.helper.make_opsetid({DOMAIN!r}, {DOMAIN_VERSION}))")
    elif DOMAIN in imports and imports[DOMAIN] != DOMAIN_VERSION:
        report.problem("domain-version-mismatch",
                       f"the model imports {DOMAIN} version {imports[DOMAIN]}; this library implements {DOMAIN} version "
                       f"{DOMAIN_VERSION} (ONNX Runtime may still run the v{DOMAIN_VERSION} kernels on it)",
                       f"export with custom_opsets={{{DOMAIN!r}: {DOMAIN_VERSION}}}, or install a plugin that provides "
                       f"{DOMAIN} v{imports[DOMAIN]}")
    for n in nodes:
        if n.op_type not in OPS:
            hint = [op for op in OPS if op.lower() == n.op_type.lower()]
            report.problem("op-not-in-domain", f"{DOMAIN}::{n.op_type} (node {n.name!r}) is not an op of this library; "
                           f"it provides {', '.join(OPS)}",
                           f"rename the node to {hint[0]!r} (op names are case-sensitive)" if hint else
                           f"use one of {', '.join(OPS)}, or decompose {n.op_type} into standard ONNX ops")
    _check_types(report, onnx, model, nodes, provider)
    if nodes and not report.problems:
        kinds = sorted({n.op_type for n in nodes})
        report.ok("model", f"opset_import {DOMAIN} v{imports.get(DOMAIN)}; {len(nodes)} {DOMAIN} node(s): {', '.join(kinds)}")


def _known_types(onnx, model) -> dict:
    try:
        model = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001  (custom domains can stop inference, with any error; fall back to what the graph declares)
        pass
    g = model.graph
    types = {t.name: t.data_type for t in g.initializer}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            types[vi.name] = vi.type.tensor_type.elem_type
    return types


def _check_types(report: Report, onnx, model, nodes, provider: str) -> None:
    supported = _CUDA_TYPES if provider == "CUDAExecutionProvider" else _CPU_TYPES
    types = _known_types(onnx, model)

    def type_of(name):
        return onnx.TensorProto.DataType.Name(types[name]) if name in types else None

    for n in nodes:
        if n.op_type not in OPS or not n.input:
            continue
        x_type = type_of(n.input[0])  # X comes first; every other input (R, W) must have its type
        if x_type and x_type not in supported:
            report.problem("type-not-supported",
                           f"node {n.name!r} ({DOMAIN}::{n.op_type}): X is {x_type.lower()}; {provider} kernels take "
                           f"{', '.join(supported.values())}",
                           "Cast X to float32 before the node (and the output back after it)")
        for index, name in enumerate(n.input[1:], start=1):
            other = type_of(name)
            if x_type and other and other != x_type:
                report.problem("type-not-supported",
                               f"node {n.name!r} ({DOMAIN}::{n.op_type}): input {index} ({name!r}) is {other.lower()}, "
                               f"X is {x_type.lower()}; every input must have X's type", f"Cast {name!r} to X's type")


# ---- the session ---------------------------------------------------------------------------

_ATTRIBUTE_NAMES = "|".join(sorted({name for attrs in ATTRIBUTES.values() for name, _ in attrs}))
_SESSION_ERRORS = (  # (pattern in ORT's message, code, fix)
    (r"too old|API version \[?\d+\]? is not available", "ort-too-old", "pip install a newer onnxruntime"),
    (r"opforge\.\w+: X: expected", "type-not-supported", "Cast X to a supported type before the node"),
    # any other input (inputs are capitalized, attributes are not): R, W
    (r"opforge\.\w+: [A-Z]\w*: expected", "bad-input",
     "give every input X's type and the shape the message names (R: X's shape, W: X.shape[-1] long)"),
    (rf"opforge\.\w+: ({_ATTRIBUTE_NAMES}): expected a FLOAT attribute", "bad-attribute",
     "write the attribute as an ONNX FLOAT (onnx.helper: beta=1.0, not 1, \"1\", a list or a tensor)"),
    (rf"opforge\.\w+: ({_ATTRIBUTE_NAMES}): expected", "bad-attribute", "fix the attribute value on the node"),
    (r"Type Error|type inferencing error", "type-not-supported", "Cast the input to a supported type"),
    (rf"Could not find an implementation for ({'|'.join(OPS)})\((\d+)\)", "domain-version-mismatch",
     f"export with custom_opsets={{{DOMAIN!r}: {DOMAIN_VERSION}}}"),
    (r"No Op registered for|Could not find an implementation|is not a registered function/op", "op-not-in-domain",
     f"the node's domain/op/version must be {DOMAIN}::{{{','.join(OPS)}}} v{DOMAIN_VERSION}"),
    (r"Failed to get symbol|undefined symbol|RegisterCustomOps", "entry-symbol-missing",
     f"export {ENTRY_SYMBOL} from the library"),
)


def _classify(report: Report, message: str, stage: str) -> None:
    """Turn ONNX Runtime's failure into a problem; when a check above already found the cause,
    ORT's message becomes that problem's evidence instead of a second problem."""
    first = message.strip().splitlines()[0] if message.strip() else message
    code, fix = "session-failed", "see ONNX Runtime's message"
    for pattern, candidate, candidate_fix in _SESSION_ERRORS:
        if re.search(pattern, message):
            code, fix = candidate, candidate_fix
            break
    same = [p for p in report.problems if p.code == code]
    target = same[0] if same else (report.problems[0] if report.problems else None)
    if target is None:
        report.problem(code, f"{stage} failed: {first}", fix)
    elif not target.evidence:
        target.evidence = f"{stage}: {first}"


# 2, not 1: a symbolic last dim of 2 suits every op (SwiGLU's halves, W of X's last dim) alike.
_SYMBOLIC_DIM = 2


def _synthetic_feeds(session, np):
    feeds = {}
    kinds = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(int32)": np.int32,
             "tensor(int64)": np.int64, "tensor(float16)": np.float16}
    for i in session.get_inputs():
        shape = [d if isinstance(d, int) and d >= 0 else _SYMBOLIC_DIM for d in i.shape]
        feeds[i.name] = np.ones(shape, dtype=kinds.get(i.type, np.float32))
    return feeds


def _check_session(report: Report, ort, model_path: str, library: str, provider: str) -> None:
    try:
        options = ort.SessionOptions()
        options.log_severity_level = 4  # the exception carries the message; keep stderr quiet
        options.register_custom_ops_library(library)
    except Exception as exc:  # noqa: BLE001  (ORT's errors share no base below Exception; classified)
        _classify(report, str(exc), "register_custom_ops_library")
        return
    try:
        session = ort.InferenceSession(model_path, options, providers=[provider])
    except Exception as exc:  # noqa: BLE001  (ORT's errors share no base below Exception; classified)
        _classify(report, str(exc), "InferenceSession")
        return
    report.ok("session", f"created on {session.get_providers()[0]}")
    import numpy as np

    try:
        session.run(None, _synthetic_feeds(session, np))
    except Exception as exc:  # noqa: BLE001  (ORT's errors share no base below Exception; classified)
        if "opforge." in str(exc):
            _classify(report, str(exc), "run with synthetic inputs")
        else:
            report.ok("run", f"skipped: synthetic inputs do not fit the model ({str(exc).splitlines()[0]})")
        return
    report.ok("run", f"one run with synthetic inputs (ones; symbolic dims = {_SYMBOLIC_DIM}) succeeded")


# ---- entry points ----------------------------------------------------------------------------

def diagnose(model_path: str, library: str | None = None, provider: str = "CPUExecutionProvider") -> Report:
    report = Report()
    library = library if library is not None else _default_library()
    if not Path(model_path).is_file():
        report.problem("model-not-found", f"model not found: {model_path}", "pass the path of an .onnx file")
        return report
    loadable = _check_library(report, library)
    min_api = _manifest(report, library) if loadable and library is not None else DEFAULT_MIN_API
    ort = _check_runtime(report, min_api)
    _check_model(report, model_path, provider)
    if ort is not None and library is not None and Path(library).is_file():
        _check_session(report, ort, model_path, library, provider)
    return report


def main(model_path: str, library: str | None = None, provider: str = "CPUExecutionProvider") -> int:
    report = diagnose(model_path, library, provider)
    print("\n".join(report.lines(f"opforge_ort doctor: {model_path}", "loads and runs")))
    return report.exit_code()
