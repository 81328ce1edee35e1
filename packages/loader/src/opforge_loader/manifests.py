"""Reading manifests from Python: bounded, regular files only, and one shape check that every
caller (Python API, CLI list/doctor/watch/manifest) goes through. The host library checks the
content (patterns, sha256, permissions, version ranges) before anything is loaded."""
from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ManifestError

SUFFIX = ".manifest.json"
KINDS = ("opforge", "onnxruntime", "tensorrt")
# Same cap as the host (kMaxManifestBytes in csrc/host/files.h); real manifests are ~1 KB.
MAX_BYTES = 1 << 20


@dataclass(frozen=True)
class ManifestOp:
    domain: str
    name: str
    version: int


@dataclass(frozen=True)
class Manifest:
    """A manifest whose fields have the types manifest.schema.json gives them."""

    path: Path
    data: dict
    name: str
    version: str
    kind: str
    api_version: int
    ops: tuple[ManifestOp, ...]

    @property
    def library(self) -> Path:
        return library_of(self.path)


def find_manifests(directory: str | os.PathLike) -> list[Path]:
    """Every <library>.manifest.json under directory, sorted like the host's scan."""
    found = [Path(root) / name for root, _dirs, files in os.walk(os.fspath(directory)) for name in files if name.endswith(SUFFIX)]
    return sorted(found, key=str)


def read_bytes(path: str | os.PathLike, max_bytes: int = MAX_BYTES) -> bytes:
    """The contents of a regular file of at most max_bytes. O_NONBLOCK: a FIFO without a writer
    must not hang the open; the file type is checked on the open descriptor, so a file swapped
    after a stat cannot sneak a FIFO or a device (a link to /dev/zero) into the read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise ManifestError(path, f"cannot open: {e.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise ManifestError(path, f"not a regular file (a {_file_type(mode)}); only regular files are read")
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ManifestError(path, f"larger than {max_bytes} bytes; a manifest is a small JSON object")
    return data


def _file_type(mode: int) -> str:
    kinds = ((stat.S_ISFIFO, "FIFO"), (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
             (stat.S_ISSOCK, "socket"), (stat.S_ISDIR, "directory"))
    return next((name for test, name in kinds if test(mode)), "special file")


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def parse_json(path: str | os.PathLike, raw: bytes) -> object:
    """The JSON value in raw (a manifest's bytes; path only names it in errors)."""
    try:
        return json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant)
    except RecursionError:
        raise ManifestError(path, "malformed manifest: nested too deeply") from None
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        raise ManifestError(path, f"malformed manifest: {e}") from None


def _type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    names = {int: "integer", float: "number", str: "string", list: "array", dict: "object"}
    return next((n for t, n in names.items() if isinstance(value, t)), type(value).__name__)


def _field(obj: dict, key: str, want: str, where: str = "") -> Any:
    label = f"{where}.{key}" if where else key
    if key not in obj:
        raise ValueError(f'missing field "{label}"')
    value = obj[key]
    if _type_name(value) != want:
        raise ValueError(f'"{label}": expected {want}, got {_type_name(value)}')
    return value


def _ops(data: dict) -> tuple[ManifestOp, ...]:
    ops = data.get("ops")
    if not isinstance(ops, list) or not ops:
        got = "an empty array" if ops == [] else _type_name(ops) if "ops" in data else "nothing"
        raise ValueError(f'"ops": expected non-empty array of {{domain, name, version}}, got {got}')
    out = []
    for i, op in enumerate(ops):
        if not isinstance(op, dict):
            raise ValueError(f'"ops[{i}]": expected object {{domain, name, version}}, got {_type_name(op)}')
        out.append(ManifestOp(_field(op, "domain", "string", f"ops[{i}]"), _field(op, "name", "string", f"ops[{i}]"),
                              _field(op, "version", "integer", f"ops[{i}]")))
    return tuple(out)


def _shape(path: Path, data: object) -> Manifest:
    """The field types of manifest.schema.json (values are the host's to judge)."""
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, got {_type_name(data)}")
    for key in ("manifest_version", "api_version"):
        _field(data, key, "integer")
    for key in ("name", "library", "version", "kind", "sha256"):
        _field(data, key, "string")
    if data["kind"] not in KINDS:
        raise ValueError(f'"kind": expected {", ".join(KINDS[:-1])} or {KINDS[-1]}, got "{data["kind"]}"')
    sdk = _field(data, "sdk", "object")
    _field(sdk, "min", "string", "sdk")
    if _type_name(sdk.get("max")) not in ("string", "null"):
        raise ValueError(f'"sdk.max": expected string or null, got {_type_name(sdk["max"])}')
    return Manifest(path, data, data["name"], data["version"], data["kind"], data["api_version"], _ops(data))


def parse(path: str | os.PathLike, raw: bytes) -> Manifest:
    """Shape-check the manifest bytes raw; ManifestError (one line: file and problem) otherwise."""
    try:
        return _shape(Path(path), parse_json(path, raw))
    except ValueError as e:
        raise ManifestError(path, f"malformed manifest: {e}") from None


def load(manifest: str | os.PathLike) -> Manifest:
    """Read (bounded, regular files only) and shape-check one manifest."""
    return parse(manifest, read_bytes(manifest))


def read(manifest: str | os.PathLike) -> dict:
    """The shape-checked JSON object of a manifest (ManifestError otherwise)."""
    return load(manifest).data


def library_of(manifest: str | os.PathLike) -> Path:
    m = Path(manifest)
    return m.with_name(m.name[: -len(SUFFIX)])


def sha256_of(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write(library: str | os.PathLike, *, name: str, version: str, kind: str, api_version: int, sdk_min: str,
          sdk_max: str | None, ops: list[tuple[str, str, int]]) -> Path:
    """Write <library>.manifest.json with the library's current sha256 (same format as the CMake
    helper opforge_write_manifest.cmake)."""
    lib = Path(library)
    data = {"manifest_version": 1, "name": name, "library": lib.name, "version": version, "kind": kind,
            "api_version": api_version, "sdk": {"min": sdk_min, "max": sdk_max},
            "ops": [{"domain": d, "name": n, "version": v} for d, n, v in ops], "sha256": sha256_of(lib)}
    target = lib.with_name(lib.name + SUFFIX)
    target.write_text(json.dumps(data, indent=2) + "\n")
    return target


def rehash(manifest: str | os.PathLike) -> str:
    """Refresh the sha256 of an existing manifest (after strip / patchelf / auditwheel)."""
    data = read(manifest)
    data["sha256"] = sha256_of(library_of(manifest))
    Path(manifest).write_text(json.dumps(data, indent=2) + "\n")
    return data["sha256"]
