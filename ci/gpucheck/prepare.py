"""--prepare DIR, where there is a network: the wheels and ORT headers a GPU machine without one needs."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

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
    matrix = _matrix()
    wanted = carried_requirements(matrix.tools, (REPO / "packages" / "ort_plugin" /
                                                 "pyproject.toml").read_text())
    wheels = dest / "wheels"
    shutil.rmtree(wheels, ignore_errors=True)
    wheels.mkdir(parents=True)
    done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                           "--disable-pip-version-check", "-q", "-d", str(wheels), *wanted])
    if done.returncode != 0:
        print(f"gpu-check --prepare: pip download {' '.join(wanted)} failed", file=sys.stderr)
        return 1
    # the ORT plugin's build requirement opforge-spec (its CMake package and metadata provider are
    # entry points: kernels/ on PYTHONPATH alone does not declare them)
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check",
                           "-q", "-w", str(wheels), str(REPO / "kernels")])
    if done.returncode != 0:
        print("gpu-check --prepare: pip wheel kernels/ (opforge-spec) failed", file=sys.stderr)
        return 1
    include = dest / "ort-include"
    shutil.rmtree(include, ignore_errors=True)
    shutil.copytree(debian.ort_include_dir(matrix), include)
    size = sum(f.stat().st_size for f in dest.rglob("*") if f.is_file())
    (dest / "carried.json").write_text(json.dumps({"wheels": sorted(p.name for p in wheels.iterdir()),
                                                   "requirements": wanted, "ort_include": "ort-include",
                                                   "bytes": size}, indent=1))
    shown = dest.relative_to(REPO) if dest.is_relative_to(REPO) else dest
    print(f"gpu-check --prepare: {shown}: {', '.join(sorted(p.name for p in wheels.iterdir()))}, "
          f"ort-include/ ({size / 2**20:.1f} MiB); on the GPU machine: python3 ci/gpu_check.py "
          f"--carried {shown} OUT")
    return 0
