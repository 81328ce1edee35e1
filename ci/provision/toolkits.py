"""Provision the CUDA toolkits that matrix.yaml describes as data (`toolkits:`).

Three sources, one result: a CUDA_HOME-like root (bin/nvcc, include/, lib64/ with a libcudart.so
symlink) in opforge's cache, verified by compiling a small .cu (cub + <nv/target>) to an object
and reading its SASS back with cuobjdump.

  system  an installed toolkit: $CUDA_HOME, else /usr/local/cuda (never the /usr/local/bin/nvcc
          wrapper, which makes torch pick /usr/local as the root); nothing is downloaded.
  pypi    NVIDIA's CUDA 13 wheels, installed with `pip install --no-deps --target` at the exact pins
          (nvcc's own requirements are unpinned and pull a mismatched ptxas).
  debian  a Debian toolkit package fetched from another suite (ci/provision/debian.py), relocated: a new
          nvcc.profile points at the unpacked tree and at the pinned PyPI include/lib wheels.

    python -m ci.toolkits list
    python -m ci.toolkits probe ID
    python -m ci.toolkits provision ID     # prints the root; progress goes to stderr
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from ci import model as mx
from ci.model.toolkit_spec import SOURCES, SpecError, ToolkitError, ToolkitSpec, parse_spec
from ci.provision import apt, debian
from ci.provision.toolkit_install import link_libcudart, pip_install, progress, relocate_debian
from ci.provision.toolkit_verify import cuobjdump, verify

__all__ = ["SOURCES", "Probe", "SpecError", "Toolkit", "ToolkitError", "ToolkitSpec", "load",
           "main", "nvcc_version", "parse_spec", "probe", "provision", "spec_of", "system_root",
           "verify"]

MATRIX = mx.MATRIX
DEFAULT_SYSTEM_ROOT = Path("/usr/local/cuda")
STAMP = ".opforge-toolkit.json"


@dataclasses.dataclass(frozen=True)
class Probe:
    available: bool
    reason: str
    cached: bool


@dataclasses.dataclass(frozen=True)
class Toolkit:
    id: str
    root: Path
    nvcc: Path
    version: str
    env: dict[str, str]



def load(path: Path = MATRIX) -> dict[str, ToolkitSpec]:
    """All toolkits of the matrix file, read and validated by ci.model (the one reader of
    matrix.yaml; its schema parses each with parse_spec); a bad file raises MatrixError."""
    return dict(mx.load(path).toolkits)


def spec_of(toolkit_id: str, path: Path = MATRIX) -> ToolkitSpec:
    specs = load(path)
    if toolkit_id not in specs:
        raise ToolkitError(f"opforge: toolkit {toolkit_id!r} is not in {path.name}; "
                           f"known: {', '.join(specs)}")
    return specs[toolkit_id]


# ---------------------------------------------------------------------------------------------
# probe: cheap, no download


def _toolkit_dir(spec: ToolkitSpec) -> Path:
    return debian.cache_root() / "toolkits" / f"{spec.id}-{spec.key()}"


def _stamp(spec: ToolkitSpec) -> dict | None:
    stamp = _toolkit_dir(spec) / STAMP
    try:
        data = json.loads(stamp.read_text())
    except (OSError, ValueError):
        return None
    if spec.source == "system" and data.get("root") != str(system_root().resolve()):
        return None  # CUDA_HOME points elsewhere now
    root = Path(data.get("root", "/nonexistent"))
    # The relocated toolkit links into the Debian and wheel caches: all must still be there.
    intact = all((root / part).exists() for part in ("bin/nvcc", "include/cuda_runtime.h", "lib64"))
    return data if intact else None


def system_root() -> Path:
    """The installed toolkit's root: $CUDA_HOME, else /usr/local/cuda."""
    home = os.environ.get("CUDA_HOME")
    return Path(home) if home else DEFAULT_SYSTEM_ROOT


def nvcc_version(nvcc: Path) -> str:
    """'13.0' from `nvcc --version` ('Cuda compilation tools, release 13.0, V13.0.88')."""
    result = subprocess.run([str(nvcc), "--version"], check=False, capture_output=True, text=True)
    found = re.search(r"release (\d+\.\d+)", result.stdout)
    if result.returncode != 0 or not found:
        raise ToolkitError(f"opforge: {nvcc}: `nvcc --version` failed: "
                           f"{(result.stderr or result.stdout).strip()[-300:]}")
    return found.group(1)


def probe(spec: ToolkitSpec | Mapping, toolkit_id: str = "toolkit") -> Probe:
    """Can this machine provide the toolkit, and is it already provisioned? Downloads nothing."""
    spec = parse_spec(getattr(spec, "id", toolkit_id), spec)
    cached = _stamp(spec) is not None
    if spec.source == "system":
        return _probe_system(spec, cached)
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "aarch64"):
        return Probe(False, f"{spec.source} toolkits exist for Linux x86_64/aarch64 only, "
                     f"this is {platform.system()} {platform.machine()}", cached)
    if cached:
        return Probe(True, f"provisioned in {_toolkit_dir(spec)}", True)
    if os.environ.get("OPFORGE_NETWORK") == "none":   # docker/run.sh's container
        return Probe(False, f"not provisioned in {_toolkit_dir(spec)}, and no network here to "
                     "download it (docker/run.sh: --network=none): the image provisions the "
                     "ci-gpu profile's toolkits; run on the host for this one", False)
    if importlib.util.find_spec("pip") is None:
        return Probe(False, f"needs pip in {sys.executable} to install the pinned wheels", False)
    if spec.source == "debian":
        missing = [tool for tool in ("apt-get", "dpkg") if not shutil.which(tool)]
        if not Path(apt.KEYRING).is_file():
            missing.append(apt.KEYRING)
        if missing:
            return Probe(False, f"needs {' and '.join(missing)} to fetch Debian packages", False)
    deb = spec.debian or {}   # source: debian names its package (parse_spec checks)
    what = "pinned PyPI wheels" if spec.source == "pypi" else \
        f"Debian {deb['suite']} {deb['package']} + pinned PyPI wheels"
    return Probe(True, f"not provisioned yet: {what} will be downloaded", False)


def _probe_system(spec: ToolkitSpec, cached: bool) -> Probe:
    root = system_root()
    nvcc = root / "bin" / "nvcc"
    if not nvcc.is_file():
        return Probe(False, f"no nvcc at {nvcc} (set CUDA_HOME to a CUDA {spec.cuda} root)", cached)
    if not (root / "include" / "cuda_runtime.h").is_file():
        return Probe(False, f"{root} has bin/nvcc but no include/cuda_runtime.h: not a toolkit "
                     "root (CUDA_HOME must name the toolkit, not /usr/local)", cached)
    try:
        version = nvcc_version(nvcc)
    except ToolkitError as exc:
        return Probe(False, str(exc), cached)
    if version != spec.cuda:
        return Probe(False, f"{nvcc} is CUDA {version}, the matrix wants {spec.cuda}", cached)
    return Probe(True, f"CUDA {version} at {root}", cached)


# ---------------------------------------------------------------------------------------------
# provision


def provision(toolkit_id: str, spec: ToolkitSpec | Mapping | None = None) -> Toolkit:
    """Make the toolkit usable and verified; fast (a stamp read) when done before."""
    spec = parse_spec(toolkit_id, spec if spec is not None else spec_of(toolkit_id))
    stamp = _stamp(spec)
    if stamp is None:
        with _lock(spec):
            stamp = _stamp(spec) or _provision_cold(spec)
    root = Path(stamp["root"])
    nvcc = root / "bin" / "nvcc"
    env = {"CUDA_HOME": str(root), "CUDA_PATH": str(root), "OPFORGE_CUDA_HOME": str(root),
           "CUDACXX": str(nvcc), "PATH": f"{root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
           "OPFORGE_CUOBJDUMP": str(cuobjdump(spec, root))}
    return Toolkit(spec.id, root, nvcc, stamp["version"], env)


@contextlib.contextmanager
def _lock(spec: ToolkitSpec) -> Iterator[None]:
    """One provisioner per toolkit at a time (parallel nox sessions share the cache)."""
    lock = debian.cache_root() / "toolkits" / f".{spec.id}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _provision_cold(spec: ToolkitSpec) -> dict:
    started = time.monotonic()
    work = _toolkit_dir(spec)
    if spec.source == "system":
        found = _probe_system(spec, False)
        if not found.available:
            raise ToolkitError(f"opforge: toolkit {spec.id}: {found.reason}; fix: install CUDA "
                               f"{spec.cuda} or point CUDA_HOME at it")
        root = system_root().resolve()
        work.mkdir(parents=True, exist_ok=True)
    else:
        _clear_half_made(work)
        root = _make_pypi(spec, work) if spec.source == "pypi" else _make_debian(spec, work)
    version = nvcc_version(root / "bin" / "nvcc")
    if version != spec.cuda:
        raise ToolkitError(f"opforge: toolkit {spec.id}: nvcc in {root} is CUDA {version}, the "
                           f"spec says {spec.cuda}; fix: correct toolkits.{spec.id} in matrix.yaml")
    verify(spec, root)
    stamp = {"root": str(root), "nvcc": str(root / "bin" / "nvcc"), "version": version,
             "spec": spec.data(), "seconds": round(time.monotonic() - started, 1)}
    (work / STAMP).write_text(json.dumps(stamp, indent=2) + "\n")
    progress(spec, f"ready in {stamp['seconds']} s: {root}")
    return stamp


def _clear_half_made(work: Path) -> None:
    """Remove an earlier failed attempt, keeping wheels that installed completely."""
    work.mkdir(parents=True, exist_ok=True)
    for entry in work.iterdir():
        if not (entry / ".installed").exists():
            shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()


def _make_pypi(spec: ToolkitSpec, work: Path) -> Path:
    pip_install(spec, spec.packages, work / "pypi")
    major = spec.cuda.split(".")[0]
    root = work / "pypi" / "nvidia" / f"cu{major}"
    if not (root / "bin" / "nvcc").is_file():
        raise ToolkitError(f"opforge: toolkit {spec.id}: the wheels gave no {root}/bin/nvcc; CUDA "
                           f"{major} wheels without nvcc cannot compile; fix: use a debian or "
                           f"system toolkit for CUDA {spec.cuda}")
    link_libcudart(spec, root / "lib")
    if not (root / "lib64").exists():  # nvcc.profile and CMake look in lib64
        (root / "lib64").symlink_to("lib")
    return root


def _make_debian(spec: ToolkitSpec, work: Path) -> Path:
    deb = spec.debian
    assert deb is not None  # source: debian names its package (parse_spec checks)
    progress(spec, f"fetching Debian {deb['suite']} {deb['package']}={deb['version']}")
    try:
        tree = debian.fetch(deb["package"], deb["version"], deb["suite"])
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        problem = str(exc).removeprefix("opforge: ")
        raise ToolkitError(f"opforge: toolkit {spec.id}: {problem}; fix: toolkits.{spec.id}.debian "
                           f"in matrix.yaml must name a package version of Debian {deb['suite']}") from None
    pip_install(spec, spec.packages, work / "pypi")
    return relocate_debian(spec, tree, work)


# ---------------------------------------------------------------------------------------------
# CLI


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ci.toolkits",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--matrix", type=Path, default=MATRIX, help="matrix file (matrix.yaml)")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="every toolkit with its probe")
    for name, text in (("probe", "can this machine provide it (no download)"),
                       ("provision", "provision and verify; print the root")):
        command = sub.add_parser(name, help=text)
        command.add_argument("id")
        command.add_argument("--spec", type=json.loads, help="the spec as JSON instead of the "
                             "matrix file's (docker/Dockerfile: no matrix.yaml in the image)")
    args = parser.parse_args(argv)
    try:
        if args.command == "list":
            for spec in load(args.matrix).values():
                found = probe(spec)
                state = "cached" if found.cached else "available" if found.available else "unavailable"
                print(f"{spec.id:24} CUDA {spec.cuda:5} {spec.source:7} {state:12} {found.reason}")
            return 0
        spec = parse_spec(args.id, args.spec) if args.spec else spec_of(args.id, args.matrix)
        if args.command == "probe":
            found = probe(spec)
            print(json.dumps(dataclasses.asdict(found)))
            return 0 if found.available else 1
        print(provision(args.id, spec).root)
    except (ToolkitError, mx.MatrixError) as exc:
        print(exc, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
