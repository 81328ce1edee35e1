"""What --prepare carries to the GPU machine, recorded in DIR/carried.json with the sha256 of every
file, and its check at the run: a carried folder holding a file it does not list, or a listed file
that is missing or changed, is refused (nothing is installed from it)."""
from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

from ci.gpucheck.common import UsageError
from ci.gpucheck.folders import MARKER

MANIFEST = "carried.json"
WHEELS = "wheels"
HEADERS = "ort-include"         # the pinned ONNX Runtime C headers
C_API = f"{HEADERS}/onnxruntime_c_api.h"
GATHERED = (WHEELS, HEADERS)    # what --prepare writes besides the manifest


@dataclasses.dataclass(frozen=True)
class Carried:
    """What a verified carried folder holds: its wheels' file names, its ORT headers' folder."""

    wheels: tuple = ()
    ort_include: str = ""


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as data:
        for block in iter(lambda: data.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def files_of(folder: Path) -> dict:
    """Every file under the folder (but the manifest and the marker) by its relative posix path."""
    return {p.relative_to(folder).as_posix(): p for p in sorted(folder.rglob("*"))
            if (p.is_file() or p.is_symlink()) and p.relative_to(folder).as_posix() not in
            (MANIFEST, MARKER)}


def record(folder: Path, requirements: list) -> dict:
    """Write the manifest of what --prepare gathered (its wheels and headers) and return it."""
    gathered = {rel: p for rel, p in files_of(folder).items() if rel.split("/")[0] in GATHERED}
    data = {"files": {rel: sha256(p) for rel, p in gathered.items()},
            "wheels": sorted(rel.split("/", 1)[1] for rel in gathered if _is_wheel(rel)),
            "requirements": requirements, "ort_include": HEADERS,
            "bytes": sum(p.stat().st_size for p in gathered.values())}
    (folder / MANIFEST).write_text(json.dumps(data, indent=1))
    return data


def _is_wheel(rel: str) -> bool:
    parts = rel.split("/")
    return len(parts) == 2 and parts[0] == WHEELS and parts[1].endswith(".whl")


def _listed(folder: Path) -> dict:
    try:
        files = json.loads((folder / MANIFEST).read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise UsageError(f"--carried {folder}: {MANIFEST} is not what --prepare writes "
                         f"({type(err).__name__}: {err}); gather again with --prepare") from None
    if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
        raise UsageError(f"--carried {folder}: {MANIFEST} is not what --prepare writes (its files "
                         "are not a mapping of paths to sha256); gather again with --prepare")
    return files


def verify(folder: Path) -> Carried:
    """The carried folder as --prepare recorded it, else UsageError; no folder: nothing carried."""
    if not folder.exists():
        return Carried()
    if not folder.is_dir():
        raise UsageError(f"--carried {folder} is a file, not a folder")
    present = files_of(folder)
    if not (folder / MANIFEST).exists():
        if present:
            raise UsageError(f"--carried {folder} holds files but no {MANIFEST} (--prepare DIR "
                             "writes it with the sha256 of each file it gathers)")
        return Carried()
    listed = _listed(folder)
    for rel in present:
        if rel not in listed:
            raise UsageError(f"--carried {folder}: {rel} is not listed in {MANIFEST}; nothing "
                             "unlisted is used (remove it, or gather again with --prepare)")
    for rel, digest in sorted(listed.items()):
        if rel not in present:
            raise UsageError(f"--carried {folder}: {rel} is listed in {MANIFEST} but missing")
        if present[rel].is_symlink() or sha256(present[rel]) != digest:
            raise UsageError(f"--carried {folder}: {rel}: its sha256 is not the one {MANIFEST} "
                             "records (gather again with --prepare)")
    wheels = tuple(sorted(rel.split("/", 1)[1] for rel in listed if _is_wheel(rel)))
    return Carried(wheels, str(folder / HEADERS) if C_API in listed else "")
