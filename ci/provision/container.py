"""What a container run needs from PyPI, for the offline wheel folder (`python3 ci/bootstrap.py -s
container_wheels -- PROFILE`).

docker/run.sh runs with --network=none; with `--wheels build/container-wheels` pip installs from
that folder only (PIP_NO_INDEX, PIP_FIND_LINKS). The folder must hold every pin a profile's stages
install: each cell's torch and ORT venvs, the tools of its stages (pytest-xdist for pytest stages),
the CUDA runtime wheels its CUDA builds declare, the packages' build backends
(pip builds them in isolation, offline too) and the TensorRT header wheel the plugin's build
fetches. The wheels are chosen for the image's Python and glibc, read from docker/apt.lock.
"""
from __future__ import annotations

import ast
import re
import subprocess
import sys
import time
from pathlib import Path

import tomllib

from ci import model as mx
from ci.provision import apt, venvs

WHEELS = mx.REPO / "build" / "container-wheels"
MACHINES = {"amd64": "x86_64", "arm64": "aarch64"}    # Debian architecture -> wheel platform


def requirement_sets(matrix: mx.Matrix, profile: str) -> list[list[str]]:
    """The pin lists the stages of `profile` install with pip, each resolvable on its own (two
    venvs may pin two numpy releases), without duplicates."""
    cells, _ = mx.expand(matrix, profile)
    stage_names = matrix.profiles[profile].stages or tuple(matrix.stages)
    stages = [matrix.stages[name] for name in stage_names]
    sets: list[tuple[str, ...]] = []
    for cell in cells:
        for stage in stages:
            if stage.venv:
                sets.append(tuple(venvs.requirements(matrix, cell, stage.venv)))
            sets += [tuple(pins) for pins in venvs.stage_tool_sets(matrix, stage)]
        sets.append(cuda_runtimes(matrix, cell))
    sets += build_requirements()
    return [list(pins) for pins in dict.fromkeys(tuple(sorted(s)) for s in sets if s)]


def cuda_runtimes(matrix: mx.Matrix, cell: mx.Cell, root: Path = mx.REPO) -> tuple[str, ...]:
    """The CUDA runtime wheels the cell's CUDA builds declare (each package's cuda-dependencies
    for the toolkit's CUDA major), as the stages install them (ci/engine/executors.py)."""
    major = matrix.toolkits[cell.values["toolkit"]].cuda.split(".")[0]
    found = []
    for pyproject in sorted((root / "packages").glob("*/pyproject.toml")):
        for settings in tomllib.loads(pyproject.read_text()).get("tool", {}).get("dynamic-metadata", []):
            found += [venvs.toolkit_pin_or(matrix, cell, req)
                      for req in settings.get("cuda-dependencies", {}).get(major, [])]
    return tuple(dict.fromkeys(found))


def build_requirements(root: Path = mx.REPO) -> list[tuple[str, ...]]:
    """The [build-system] requires of kernels/ and of each package, but torch (torch_ext builds
    without isolation against the venv's own torch) and opforge-spec (this tree's kernels/, built
    into a wheel beside the packages, not on any index)."""
    found = []
    for pyproject in [root / "kernels" / "pyproject.toml",
                      *sorted((root / "packages").glob("*/pyproject.toml"))]:
        if pyproject.is_file():
            build = tomllib.loads(pyproject.read_text()).get("build-system", {})
            found.append(tuple(r for r in build.get("requires", [])
                               if not re.match(r"(torch|opforge-spec)\b", r)))
    return found


def no_deps_requirements(root: Path = mx.REPO) -> list[str]:
    """Pins a build fetches with `pip download --no-deps`: the TensorRT header wheel, as
    packages/trt_plugin/cmake/trt_headers.py pins it (its one source)."""
    script = root / "packages" / "trt_plugin" / "cmake" / "trt_headers.py"
    for node in ast.parse(script.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "PIN" for t in node.targets):
            name, specifier = ast.literal_eval(node.value)
            return [f"{name}{specifier}"]
    raise SystemExit(f"{script}: no PIN = (name, specifier)")


def target(lock: apt.Lock) -> list[str]:
    """pip download's target options for the image: its CPython (Debian's python3) and its glibc
    (libc6), so the folder holds wheels the image can install whatever the host is."""
    libc = lock.parts["image"]["libc6"]
    python = ".".join(_upstream(lock.parts["image"]["python3"].version).split(".")[:2])
    glibc = ".".join(_upstream(libc.version).split(".")[:2])
    return pip_target(python, glibc, MACHINES.get(libc.architecture, libc.architecture))


def pip_target(python: str, glibc: str, machine: str) -> list[str]:
    """pip download's options for another system: CPython `python` ("3.11") on glibc `glibc`
    ("2.36"). pip matches --platform literally: every manylinux tag that glibc accepts, down to
    2.17 (manylinux2014 is 2.17's legacy alias)."""
    major, minor = (int(part) for part in glibc.split("."))
    platforms = [f"manylinux_{major}_{m}_{machine}" for m in range(minor, 16, -1)]
    platforms.append(f"manylinux2014_{machine}")
    return ["--only-binary=:all:", "--implementation", "cp", "--python-version", python,
            *(option for platform in platforms for option in ("--platform", platform))]


def _upstream(debian_version: str) -> str:
    """3.11.2-1+b1 -> 3.11.2; 1:2.36-9 -> 2.36 (epoch and Debian revision dropped)."""
    return debian_version.split(":", 1)[-1].rsplit("-", 1)[0]


def download_wheels(profile: str, dest: Path = WHEELS) -> None:
    """Every pin a container run of `profile` installs, downloaded into dest for the image's
    Python and platform (docker/run.sh --wheels DEST: pip works offline there). Says what it
    downloads, set by set, and how much the folder holds (a cold host profile: GBs)."""
    # one resolution per venv's pin list; the header wheel without its dependencies
    sets = [*requirement_sets(mx.load(), profile), ["--no-deps", *no_deps_requirements()]]
    download(sets, dest, target(apt.load()))
    print(f"wheels for profile {profile} in {dest}: docker/run.sh --wheels {dest} ...")


def download(sets: list[list[str]], dest: Path, platform: list[str]) -> None:
    """pip download of each pin list into dest, a line before and after each."""
    pip = [sys.executable, "-m", "pip", "download", "--progress-bar", "off", "--dest", str(dest),
           *platform]
    started = time.monotonic()
    for number, pins in enumerate(sets, 1):
        print(f"opforge: container wheels {number}/{len(sets)}: {' '.join(pins)}", flush=True)
        subprocess.run([*pip, *pins], check=True)
        print(f"opforge: container wheels {number}/{len(sets)} done: {folder_size(dest)} in "
              f"{dest} after {time.monotonic() - started:.0f} s", flush=True)


def folder_size(folder: Path) -> str:
    """'412 files, 3.21 GB'."""
    files = [path for path in folder.iterdir() if path.is_file()] if folder.is_dir() else []
    return f"{len(files)} files, {sum(path.stat().st_size for path in files) / 1e9:.2f} GB"


if __name__ == "__main__":
    download_wheels(sys.argv[1] if len(sys.argv) > 1 else "tests")
