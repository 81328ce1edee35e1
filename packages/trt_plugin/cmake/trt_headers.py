"""Print the folder holding TensorRT's public headers (NvInferRuntime.h), fetching them if needed.

The headers come from the PyPI wheel pinned here (PIN: kernel-lens, Apache-2.0 TensorRT 10.14.1
headers under kernel_lens/include/tensorrt/). The wheel is downloaded with `pip download --no-deps`
and only its header folder is unpacked into opforge's cache ($OPFORGE_CACHE, default
~/.cache/opforge): installing it would pull torch and triton, which a header fetch has no use for.
Nothing is copied into the repo. Prints `<folder>;<pin>`.
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


def fetch(name: str = PIN[0], version: str = PIN[1]) -> Path:
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
