"""Print the folder holding TensorRT's public headers (NvInferRuntime.h), fetching them if needed.

The headers come from the PyPI wheel pinned here (PIN: kernel-lens, Apache-2.0 TensorRT 10.14.1
headers under kernel_lens/include/tensorrt/). Where the pinned release is installed for this
Python (found through its package location, never imported: its __init__ imports torch), its
headers are used as they are. Else the wheel is downloaded with `pip download --no-deps` and only
its header folder is unpacked into opforge's cache ($OPFORGE_CACHE, default ~/.cache/opforge): it is
not a build requirement because installing it pulls its dependencies, torch (with PyPI's CUDA
wheels) and triton, into every build environment. Nothing is copied into the repo. Prints
`<folder>;<pin>`.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

PIN = ("kernel-lens", "==2.0.1")  # TensorRT 10.14.1 headers; pip name, version specifier
WHEEL_SHA256 = "07cc714e8b5e7f34b672f7c7fad93febe7c747be5837ba276b1527370134ffe0"  # its only file
MEMBER_PREFIX = "kernel_lens/include/tensorrt/"


def cache_root() -> Path:
    base = os.environ.get("OPFORGE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "opforge")
    return Path(base)


def pinned(*_ignored: object) -> tuple[str, str]:
    """PIN. Arguments are ignored: older callers passed the repository root."""
    return PIN


def installed(name: str = PIN[0], version: str = PIN[1]) -> Path | None:
    """The header folder of the pinned release installed for this Python, if it is."""
    import importlib.metadata
    import importlib.util

    try:
        if importlib.metadata.version(name) != version.removeprefix("=="):
            return None
        spec = importlib.util.find_spec(MEMBER_PREFIX.split("/", maxsplit=1)[0])
    except (importlib.metadata.PackageNotFoundError, ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))).parent / MEMBER_PREFIX
    return folder if (folder / "NvInferRuntime.h").is_file() else None


def fetch(name: str = PIN[0], version: str = PIN[1]) -> Path:
    found = installed(name, version)
    if found is not None:
        return found
    target = cache_root() / "pypi" / f"{name}{version.replace('==', '-')}" / "tensorrt"
    if (target / "NvInferRuntime.h").is_file():
        return target
    with tempfile.TemporaryDirectory() as tmp:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                   "--disable-pip-version-check", "-q", "-d", tmp, f"{name}{version}"]
        done = subprocess.run(command, stdout=sys.stderr)
        if done.returncode != 0:
            raise SystemExit(f"opforge_trt: `{' '.join(command[2:])}` failed; set OPFORGE_TRT_INCLUDE_DIR "
                             "to a folder holding TensorRT's NvInferRuntime.h")
        wheel = next(Path(tmp).glob("*.whl"))
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        if digest != WHEEL_SHA256:
            raise SystemExit(f"opforge_trt: {wheel.name}: expected sha256 {WHEEL_SHA256} (the pinned "
                             f"wheel), got {digest}; set OPFORGE_TRT_INCLUDE_DIR to trusted headers")
        target.parent.mkdir(parents=True, exist_ok=True)
        # a folder of this fetch's own: concurrent builds never write into each other's
        partial = Path(tempfile.mkdtemp(prefix=target.name + ".partial-", dir=target.parent))
        with zipfile.ZipFile(wheel) as archive:
            for member in archive.namelist():
                if member.startswith(MEMBER_PREFIX) and not member.endswith("/"):
                    (partial / member[len(MEMBER_PREFIX):]).write_bytes(archive.read(member))
        if not (partial / "NvInferRuntime.h").is_file():
            raise SystemExit(f"opforge_trt: {wheel.name} has no {MEMBER_PREFIX}NvInferRuntime.h")
        try:
            partial.rename(target)  # complete or absent: a killed build leaves no half folder behind
        except OSError:  # a concurrent build got there first
            shutil.rmtree(partial, ignore_errors=True)
            if not (target / "NvInferRuntime.h").is_file():
                raise
    return target


def main() -> int:
    name, version = PIN
    print(f"{fetch(name, version)};{name}{version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())  # arguments are ignored (older callers passed the repository root)
