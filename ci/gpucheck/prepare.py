"""--prepare DIR, where there is a network: the wheels and ORT headers a GPU machine without one
needs, and DIR/carried.json with the sha256 of each (the run uses nothing else). Only this module
reads matrix.yaml (ci.model, pydantic): ci/gpu_check.py imports it for --prepare alone."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from ci.gpucheck import carried, folders
from ci.gpucheck.common import REPO
from ci.provision import debian


def carried_requirements(tools: dict, ort_plugin_pyproject: str) -> list:
    """What --prepare downloads: Liger-Kernel at matrix.yaml's pin, and the scikit-build-core
    the ORT plugin's pyproject.toml builds with (its own pin: the machine may have another)."""
    import tomllib  # noqa: PLC0415  (Python 3.11+; only --prepare reads a pyproject.toml)

    requires = tomllib.loads(ort_plugin_pyproject)["build-system"]["requires"]
    backend = next(r for r in requires if r.startswith("scikit-build-core"))
    return [f"liger-kernel=={tools['liger-kernel']}", backend]


def _matrix():
    """matrix.yaml through ci.model; in the bootstrap venv (re-executed there) when this
    python lacks what ci.model reads it with."""
    # Where this python lacks what ci.model reads matrix.yaml with, the import fails and the
    # check runs again in the bootstrap venv.
    try:
        from ci import model as mx  # noqa: PLC0415
    except ImportError:
        from ci import bootstrap  # noqa: PLC0415  (only where the import above failed)

        python = bootstrap.ensure_venv(bootstrap.read_requirements(
            bootstrap.read_bytes(REPO / "matrix.yaml")))
        os.execv(str(python), [str(python), str(REPO / "ci" / "gpu_check.py"), *sys.argv[1:]])
    return mx.load()


def prepare(dest: Path) -> int:
    # refused before matrix.yaml is read (that may run this again in the bootstrap venv)
    folders.check_writable(dest, "--prepare")
    matrix = _matrix()
    wanted = carried_requirements(matrix.tools, (REPO / "packages" / "ort_plugin" /
                                                 "pyproject.toml").read_text())
    folders.claim(dest, "--prepare")
    folders.remove_own(dest, (*carried.GATHERED, carried.MANIFEST))
    if not gather(dest, wanted, debian.ort_include_dir(matrix)):
        return 1
    data = carried.record(dest, wanted)
    shown = dest.relative_to(REPO) if dest.is_relative_to(REPO) else dest
    print(f"gpu-check --prepare: {shown}: {', '.join(data['wheels'])}, {carried.HEADERS}/ "
          f"({data['bytes'] / 2**20:.1f} MiB, sha256 of each in {carried.MANIFEST}); on the GPU "
          f"machine: python3 ci/gpu_check.py --carried {shown} OUT")
    return 0


def gather(dest: Path, wanted: list, ort_include: Path) -> bool:
    """The wheels (downloaded, and opforge-spec's built) and the ORT headers into dest."""
    wheels = dest / carried.WHEELS
    wheels.mkdir()
    done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                           "--disable-pip-version-check", "-q", "-d", str(wheels), *wanted])
    if done.returncode != 0:
        print(f"gpu-check --prepare: pip download {' '.join(wanted)} failed", file=sys.stderr)
        return False
    # the ORT plugin's build requirement opforge-spec (its CMake package and metadata provider are
    # entry points: kernels/ on PYTHONPATH alone does not declare them)
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check",
                           "-q", "-w", str(wheels), str(REPO / "kernels")])
    if done.returncode != 0:
        print("gpu-check --prepare: pip wheel kernels/ (opforge-spec) failed", file=sys.stderr)
        return False
    shutil.copytree(ort_include, dest / carried.HEADERS)
    return True
