"""Reading manifests from Python (the host library does the validation)."""
from __future__ import annotations

import json
import os
from pathlib import Path

SUFFIX = ".manifest.json"


def find_manifests(directory: str | os.PathLike) -> list[Path]:
    """Every <library>.manifest.json under directory, sorted like the host's scan."""
    found = [Path(root) / name for root, _dirs, files in os.walk(directory) for name in files if name.endswith(SUFFIX)]
    return sorted(found, key=str)


def read(manifest: str | os.PathLike) -> dict:
    with open(manifest, encoding="utf-8") as f:
        return json.load(f)


def library_of(manifest: str | os.PathLike) -> Path:
    m = Path(manifest)
    return m.with_name(m.name[: -len(SUFFIX)])


def sha256_of(path: str | os.PathLike) -> str:
    import hashlib

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
