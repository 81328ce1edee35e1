"""Print the folder holding TensorRT's public headers (NvInferRuntime.h), fetching them if needed.

The headers come from the PyPI wheel matrix.yaml pins in `sources.trt_headers` (kernel-lens,
Apache-2.0 TensorRT headers under kernel_lens/include/tensorrt/). The wheel is downloaded with
`pip download --no-deps` and only its header folder is unpacked into opforge's cache: installing
it would pull torch and triton, which a header fetch has no use for. Nothing is copied into the repo.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import yaml

MEMBER_PREFIX = "kernel_lens/include/tensorrt/"


def cache_root() -> Path:
    base = os.environ.get("OPFORGE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "opforge")
    return Path(base)


def pinned(repo_root: Path) -> tuple[str, str]:
    spec = yaml.safe_load((repo_root / "matrix.yaml").read_text())["sources"]["trt_headers"]
    return spec["pypi"], spec["version"]  # ("kernel-lens", "==2.0.1")


def fetch(name: str, version: str) -> Path:
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
        partial = target.with_name(target.name + ".partial")
        partial.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheel) as archive:
            for member in archive.namelist():
                if member.startswith(MEMBER_PREFIX) and not member.endswith("/"):
                    (partial / member[len(MEMBER_PREFIX):]).write_bytes(archive.read(member))
        if not (partial / "NvInferRuntime.h").is_file():
            raise SystemExit(f"opforge_trt: {wheel.name} has no {MEMBER_PREFIX}NvInferRuntime.h")
        try:
            partial.rename(target)  # complete or absent: a killed build leaves no half folder behind
        except OSError:  # a concurrent build got there first
            if not (target / "NvInferRuntime.h").is_file():
                raise
    return target


def main(repo_root: str) -> int:
    name, version = pinned(Path(repo_root))
    print(f"{fetch(name, version)};{name}{version}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
