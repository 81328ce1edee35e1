"""The folders the GPU check writes (OUT, --work, --prepare DIR): refused where they are a file, hold
the repository or hold files the check did not write. A folder it made its own holds MARKER; only
such a folder is ever emptied, and only of what the check writes there."""
from __future__ import annotations

import shutil
from pathlib import Path

from ci.gpucheck.common import REPO, UsageError

MARKER = ".opforge-gpu-check"
MARKER_TEXT = "written by python3 ci/gpu_check.py: it replaces what it wrote into this folder\n"


def ours(folder: Path) -> bool:
    return (folder / MARKER).is_file()


def _has_files(folder: Path, option: str) -> bool:
    try:
        return any(folder.iterdir())
    except OSError as err:
        raise UsageError(f"{option} {folder}: cannot be read: {err.strerror or err}") from None


def check_writable(folder: Path, option: str) -> None:
    """Refuse (UsageError) a folder the check may not make its own; writes nothing."""
    for above in (folder, *folder.parents):
        if above.exists() and not above.is_dir():
            raise UsageError(f"{option} {folder}: {above} is a file, not a folder")
    if REPO.is_relative_to(folder):
        raise UsageError(f"{option} {folder}: it holds the repository ({REPO}); give a folder of "
                         "its own")
    if folder.is_dir() and not ours(folder) and _has_files(folder, option):
        raise UsageError(f"{option} {folder} holds files gpu-check did not write; give a new or "
                         f"empty folder (gpu-check marks its own with {MARKER})")


def claim(folder: Path, option: str) -> None:
    """Make the folder the check's own: checked, created and marked."""
    check_writable(folder, option)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / MARKER).write_text(MARKER_TEXT)
    except OSError as err:
        raise UsageError(f"{option} {folder}: cannot be written: {err.strerror or err}") from None


def remove_own(folder: Path, names) -> None:
    """Remove `names` (files or folders the check wrote) from a folder marked as the check's own."""
    if not ours(folder):
        raise UsageError(f"{folder} is not marked as gpu-check's own ({MARKER}): nothing removed")
    for name in names:
        path = folder / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()


def empty(folder: Path) -> None:
    """Everything but the marker out of a folder marked as the check's own (--work)."""
    remove_own(folder, sorted(p.name for p in folder.iterdir() if p.name != MARKER))


def apart(inner: Path, outer: Path) -> bool:
    return not (inner.is_relative_to(outer) or outer.is_relative_to(inner))
