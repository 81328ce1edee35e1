"""Provision the CUDA toolkits that matrix.yaml describes as data (`toolkits:`).

Three sources, one result: a CUDA_HOME-like root (bin/nvcc, include/, lib64/ with a libcudart.so
symlink) in opforge's cache, verified by compiling a small .cu (cub + <nv/target>) to an object
and reading its SASS back with cuobjdump.

  system  an installed toolkit: $CUDA_HOME, else /usr/local/cuda (never the /usr/local/bin/nvcc
          wrapper, which makes torch pick /usr/local as the root); nothing is downloaded.
  pypi    NVIDIA's CUDA 13 wheels, installed with `pip install --no-deps --target` at the exact pins
          (nvcc's own requirements are unpinned and pull a mismatched ptxas).
  debian  a Debian toolkit package fetched from another suite (ci/debian.py), relocated: a new
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
import hashlib
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

try:
    from ci import debian
    from ci import matrix as mx
except ImportError:  # run as a script: python ci/toolkits.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from ci import debian
    from ci import matrix as mx

REPO = Path(__file__).resolve().parent.parent
MATRIX = mx.MATRIX
SOURCES = ("system", "pypi", "debian")
KEYS = {"cuda", "source", "packages", "debian", "cuobjdump"}
DEBIAN_KEYS = {"suite", "package", "version"}
DEFAULT_SYSTEM_ROOT = Path("/usr/local/cuda")
# sm_80 is the one architecture every CUDA release from 11.0 to 13.x compiles for.
VERIFY_ARCH = "80"
STAMP = ".opforge-toolkit.json"
PIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*==[0-9][A-Za-z0-9.+!-]*$")
TOOLKIT_ID = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
CUDA_VERSION = re.compile(r"^\d+\.\d+$")

VERIFY_SOURCE = r"""
#include <cub/block/block_reduce.cuh>
#include <nv/target>

__global__ void opforge_toolkit_check(float* data) {
  using Reduce = cub::BlockReduce<float, 32>;
  __shared__ typename Reduce::TempStorage storage;
  float total = Reduce(storage).Sum(data[threadIdx.x]);
  NV_IF_TARGET(NV_PROVIDES_SM_70, (if (threadIdx.x == 0) data[0] = total;))
}
"""


class ToolkitError(RuntimeError):
    """A toolkit that is misdescribed, unavailable or broken; the message names the id and the fix."""


class SpecError(ToolkitError):
    """A `toolkits:` entry that is misdescribed: where (`toolkits.<id>.<key>`) and the problem as
    fields, so ci.matrix reports it in its own `matrix.yaml: <where>: <problem>` shape."""

    def __init__(self, where: str, problem: str):
        self.where, self.problem = where, problem
        super().__init__(f"opforge: matrix.yaml: {where}: {problem}")


@dataclasses.dataclass(frozen=True)
class ToolkitSpec:
    id: str
    cuda: str
    source: str
    packages: tuple[str, ...] = ()
    debian: Mapping[str, str] | None = None
    cuobjdump: str | None = None

    def data(self) -> dict:
        """The spec as matrix.yaml writes it (canonical: used for the cache key)."""
        out: dict = {"cuda": self.cuda, "source": self.source}
        if self.packages:
            out["packages"] = list(self.packages)
        if self.debian:
            out["debian"] = dict(self.debian)
        if self.cuobjdump:
            out["cuobjdump"] = self.cuobjdump
        return out

    def key(self) -> str:
        return hashlib.sha256(json.dumps(self.data(), sort_keys=True).encode()).hexdigest()[:10]


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


# ---------------------------------------------------------------------------------------------
# the data


def _fail(toolkit_id: str, key: str, expected: str, got: object) -> SpecError:
    where = f"toolkits.{toolkit_id}" + (f".{key}" if key else "")
    return SpecError(where, f"expected {expected}, got {got!r}")


def parse_spec(toolkit_id: str, data: object) -> ToolkitSpec:
    """Validate one `toolkits:` entry; raise SpecError naming the key on the first problem."""
    if not isinstance(toolkit_id, str) or not TOOLKIT_ID.match(toolkit_id):
        raise _fail(str(toolkit_id), "", "an id of lower-case letters, digits, '.', '-', '_'",
                    toolkit_id)
    if isinstance(data, ToolkitSpec):
        return data
    if not isinstance(data, Mapping):
        raise _fail(toolkit_id, "", "a mapping with cuda and source", data)
    unknown = sorted(str(key) for key in set(data) - KEYS)
    if unknown:
        raise _fail(toolkit_id, str(unknown[0]), f"one of the keys {sorted(KEYS)}", unknown[0])
    cuda = data.get("cuda")
    if not isinstance(cuda, str) or not CUDA_VERSION.match(cuda):
        raise _fail(toolkit_id, "cuda", 'a quoted "MAJOR.MINOR" string such as "13.0"', cuda)
    source = data.get("source")
    if source not in SOURCES:
        raise _fail(toolkit_id, "source", f"one of {list(SOURCES)}", source)
    packages = _parse_packages(toolkit_id, source, cuda, data.get("packages"))
    deb = _parse_debian(toolkit_id, source, cuda, data.get("debian"))
    cuobjdump = data.get("cuobjdump")
    if cuobjdump is not None and (not isinstance(cuobjdump, str) or not PIN.match(cuobjdump)):
        raise _fail(toolkit_id, "cuobjdump", "a pin such as 'nvidia-cuda-cuobjdump==13.5.37'",
                    cuobjdump)
    return ToolkitSpec(toolkit_id, cuda, source, packages, deb, cuobjdump)


def _parse_packages(toolkit_id: str, source: str, cuda: str, packages: object) -> tuple[str, ...]:
    if source == "system":
        if packages:
            raise _fail(toolkit_id, "packages", "nothing for a system toolkit", packages)
        return ()
    if not isinstance(packages, list) or not packages:
        raise _fail(toolkit_id, "packages", "a non-empty list of exact pins 'name==version'",
                    packages)
    for pin in packages:
        if not isinstance(pin, str) or not PIN.match(pin):
            raise _fail(toolkit_id, "packages", "exact pins 'name==version'", pin)
        if not pin.split("==")[1].startswith(cuda + "."):
            raise _fail(toolkit_id, "packages", f"versions of CUDA {cuda} ({cuda}.*)", pin)
    names = [pin.split("==")[0] for pin in packages]
    needed = ["nvidia-cuda-runtime", "nvidia-cuda-cccl"] + (["nvidia-cuda-nvcc"] if source == "pypi" else [])
    for need in needed:
        if not any(name.startswith(need) for name in names):
            raise _fail(toolkit_id, "packages", f"a pin of {need}* (the toolkit is incomplete without it)",
                        packages)
    return tuple(packages)


def _parse_debian(toolkit_id: str, source: str, cuda: str, deb: object) -> Mapping[str, str] | None:
    if source != "debian":
        if deb is not None:
            raise _fail(toolkit_id, "debian", f"nothing for a {source} toolkit", deb)
        return None
    if not isinstance(deb, Mapping) or set(deb) != DEBIAN_KEYS:
        raise _fail(toolkit_id, "debian", f"a mapping with exactly {sorted(DEBIAN_KEYS)}", deb)
    for key in sorted(DEBIAN_KEYS):
        if not isinstance(deb[key], str) or not deb[key]:
            raise _fail(toolkit_id, f"debian.{key}", "a non-empty string", deb[key])
    if not deb["version"].startswith(cuda + "."):
        raise _fail(toolkit_id, "debian.version", f"a version of CUDA {cuda} ({cuda}.*)",
                    deb["version"])
    return dict(deb)


def load(path: Path = MATRIX) -> dict[str, ToolkitSpec]:
    """All toolkits of the matrix file, read and validated by ci.matrix (the one reader of
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
    if importlib.util.find_spec("pip") is None:
        return Probe(False, f"needs pip in {sys.executable} to install the pinned wheels", False)
    if spec.source == "debian":
        missing = [tool for tool in ("apt-get", "dpkg") if not shutil.which(tool)]
        if not Path(debian.KEYRING).is_file():
            missing.append(debian.KEYRING)
        if missing:
            return Probe(False, f"needs {' and '.join(missing)} to fetch Debian packages", False)
    what = "pinned PyPI wheels" if spec.source == "pypi" else \
        f"Debian {spec.debian['suite']} {spec.debian['package']} + pinned PyPI wheels"
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
           "OPFORGE_CUOBJDUMP": str(_cuobjdump(spec, root))}
    return Toolkit(spec.id, root, nvcc, stamp["version"], env)


@contextlib.contextmanager
def _lock(spec: ToolkitSpec) -> Iterator[None]:
    """One provisioner per toolkit at a time (parallel nox sessions share the cache)."""
    lock = debian.cache_root() / "toolkits" / f".{spec.id}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _progress(spec: ToolkitSpec, message: str) -> None:
    print(f"opforge: toolkit {spec.id}: {message}", file=sys.stderr, flush=True)


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
    _progress(spec, f"ready in {stamp['seconds']} s: {root}")
    return stamp


def _clear_half_made(work: Path) -> None:
    """Remove an earlier failed attempt, keeping wheels that installed completely."""
    work.mkdir(parents=True, exist_ok=True)
    for entry in work.iterdir():
        if not (entry / ".installed").exists():
            shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()


def _pip_install(spec: ToolkitSpec, pins: tuple[str, ...], target: Path) -> None:
    done = target / ".installed"
    if done.exists() and done.read_text().split() == list(pins):
        return
    _progress(spec, f"pip install --no-deps {' '.join(pins)}")
    command = [sys.executable, "-m", "pip", "install", "--no-deps", "--only-binary=:all:", "--no-cache-dir",
               "--disable-pip-version-check", "--no-compile", "--progress-bar", "off",
               "--target", str(target), *pins]
    result = subprocess.run(command, check=False, stdout=sys.stderr, stderr=subprocess.PIPE, text=True)
    if result.returncode != 0:
        raise ToolkitError(f"opforge: toolkit {spec.id}: pip could not install {' '.join(pins)}: "
                           f"{result.stderr.strip()[-600:]}; fix: check the pins in "
                           f"toolkits.{spec.id} of matrix.yaml and that PyPI is reachable")
    done.write_text("\n".join(pins) + "\n")


def _link_libcudart(spec: ToolkitSpec, lib: Path) -> None:
    """libcudart.so for `-lcudart` (the wheels ship only libcudart.so.MAJOR)."""
    versioned = sorted(lib.glob("libcudart.so.*"))
    if not versioned:
        raise ToolkitError(f"opforge: toolkit {spec.id}: no libcudart.so.* in {lib}; fix: pin "
                           f"nvidia-cuda-runtime in toolkits.{spec.id} of matrix.yaml")
    if not (lib / "libcudart.so").exists():
        (lib / "libcudart.so").symlink_to(versioned[0].name)


def _make_pypi(spec: ToolkitSpec, work: Path) -> Path:
    _pip_install(spec, spec.packages, work / "pypi")
    major = spec.cuda.split(".")[0]
    root = work / "pypi" / "nvidia" / f"cu{major}"
    if not (root / "bin" / "nvcc").is_file():
        raise ToolkitError(f"opforge: toolkit {spec.id}: the wheels gave no {root}/bin/nvcc; CUDA "
                           f"{major} wheels without nvcc cannot compile; fix: use a debian or "
                           f"system toolkit for CUDA {spec.cuda}")
    _link_libcudart(spec, root / "lib")
    if not (root / "lib64").exists():  # nvcc.profile and CMake look in lib64
        (root / "lib64").symlink_to("lib")
    return root


def _make_debian(spec: ToolkitSpec, work: Path) -> Path:
    deb = spec.debian
    _progress(spec, f"fetching Debian {deb['suite']} {deb['package']}={deb['version']}")
    try:
        tree = debian.fetch(deb["package"], deb["version"], deb["suite"])
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        problem = str(exc).removeprefix("opforge: ")
        raise ToolkitError(f"opforge: toolkit {spec.id}: {problem}; fix: toolkits.{spec.id}.debian "
                           f"in matrix.yaml must name a package version of Debian {deb['suite']}") from None
    _pip_install(spec, spec.packages, work / "pypi")
    return _relocate_debian(spec, tree, work)


def _relocate_debian(spec: ToolkitSpec, tree: Path, work: Path) -> Path:
    """A root whose bin/nvcc reads our nvcc.profile instead of the package's /etc/nvcc.profile."""
    tools = tree / "usr" / "lib" / "nvidia-cuda-toolkit"
    if not (tools / "bin" / "nvcc").is_file():
        raise ToolkitError(f"opforge: toolkit {spec.id}: no usr/lib/nvidia-cuda-toolkit/bin/nvcc in "
                           f"{tree}; fix: toolkits.{spec.id}.debian must name the package that "
                           f"ships nvcc (nvidia-cuda-toolkit)")
    root = work / "root"
    (root / "bin").mkdir(parents=True)
    # nvcc reads nvcc.profile from the folder it runs from: a copy of the binary gets ours.
    shutil.copy2(tools / "bin" / "nvcc", root / "bin" / "nvcc")
    for tool in sorted((tree / "usr" / "bin").iterdir()):
        if tool.name != "nvcc":  # usr/bin/nvcc is a wrapper script with absolute paths
            (root / "bin" / tool.name).symlink_to(tool.resolve())
    for name in ("cicc", "crt"):  # crt/ holds the link stubs nvcc expects beside itself
        (root / "bin" / name).symlink_to(tools / "bin" / name)
    (root / "nvvm").mkdir()
    (root / "nvvm" / "libdevice").symlink_to(tools / "libdevice")
    _merge(spec, root / "include", sorted((work / "pypi" / "nvidia").glob("*/include")))
    _merge(spec, root / "lib64", sorted((work / "pypi" / "nvidia").glob("*/lib")))
    _link_libcudart(spec, root / "lib64")
    _stand_in_static_runtime(root / "lib64")
    (root / "bin" / "nvcc.profile").write_text(
        "# Written by opforge ci/toolkits.py: the Debian package relocated into a cache.\n"
        "TOP = $(_HERE_)/..\n"
        "NVVMIR_LIBRARY_DIR = $(TOP)/nvvm/libdevice\n"
        # Debian's folder also holds a g++ wrapper that picks a host compiler CUDA 12.4 supports.
        f"PATH += $(TOP)/bin:{tools / 'bin'}:\n"
        'INCLUDES += "-I$(TOP)/include" $(_SPACE_)\n'
        'LIBRARIES =+ $(_SPACE_) "-L$(TOP)/lib64"\n')
    return root


def _stand_in_static_runtime(lib64: Path) -> None:
    """Linker scripts for the static libraries nvcc links by default and no small package ships.

    nvcc adds -lcudart_static -lcudadevrt to every link (CMake's compiler check links that way);
    Debian has them only in the 900 MB nvidia-cuda-dev. GNU ld reads a file it cannot parse as an
    archive as a linker script: cudart_static becomes the shared runtime (opforge links libcudart
    dynamically anyway) and cudadevrt is empty, so relocatable device code (-rdc, dynamic
    parallelism) fails to link with this toolkit, loudly, while ordinary kernels link.
    """
    cudart = min(lib64.glob("libcudart.so.*")).name
    (lib64 / "libcudart_static.a").write_text(
        f"/* opforge: no static CUDA runtime in this toolkit; use the shared one */\nINPUT({cudart})\n")
    (lib64 / "libcudadevrt.a").write_text(
        "/* opforge: no device runtime in this toolkit (no -rdc, no dynamic parallelism) */\n")


def _merge(spec: ToolkitSpec, into: Path, sources: list[Path]) -> None:
    """Symlink every entry of the source folders into one folder; a name clash is an error."""
    into.mkdir(parents=True, exist_ok=True)
    for source in sources:
        for entry in sorted(source.iterdir()):
            if entry.name in ("__init__.py", "__pycache__"):  # the wheels' package markers
                continue
            link = into / entry.name
            if link.is_symlink() or link.exists():
                if entry.is_dir() and link.is_dir():
                    _merge_dir(link, entry)
                    continue
                raise ToolkitError(f"opforge: toolkit {spec.id}: {entry.name} comes from two "
                                   f"wheels ({link.resolve()} and {entry}); fix: pin one release")
            link.symlink_to(entry)


def _merge_dir(link: Path, entry: Path) -> None:
    """Two wheels share a folder (include/crt): turn the symlink into a folder of symlinks."""
    if link.is_symlink():
        first = link.resolve()
        link.unlink()
        link.mkdir()
        for item in first.iterdir():
            (link / item.name).symlink_to(item)
    for item in entry.iterdir():
        if not (link / item.name).exists():
            (link / item.name).symlink_to(item)


# ---------------------------------------------------------------------------------------------
# verify


def verify(spec: ToolkitSpec, root: Path) -> None:
    """Compile a cub/<nv/target> kernel for one arch, check its SASS, link it against libcudart."""
    _progress(spec, f"verifying: nvcc -arch=sm_{VERIFY_ARCH} on a cub kernel")
    nvcc = root / "bin" / "nvcc"
    with tempfile.TemporaryDirectory(prefix="opforge-toolkit-") as tmp:
        source, obj, shared = Path(tmp, "check.cu"), Path(tmp, "check.o"), Path(tmp, "check.so")
        source.write_text(VERIFY_SOURCE)
        _run_checked(spec, [str(nvcc), "-c", f"-arch=sm_{VERIFY_ARCH}", "-Xcompiler", "-fPIC",
                            "-o", str(obj), str(source)], "compiling a .cu file")
        listing = _run_checked(spec, [str(_cuobjdump(spec, root)), "--list-elf", str(obj)],
                               "listing the object's SASS")
        if f"sm_{VERIFY_ARCH}" not in listing:
            raise ToolkitError(f"opforge: toolkit {spec.id}: no sm_{VERIFY_ARCH} SASS in the "
                               f"compiled object (cuobjdump: {listing.strip()!r})")
        _run_checked(spec, [str(nvcc), "-shared", "-cudart", "shared", "-o", str(shared), str(obj)],
                     "linking a shared library against lib64/libcudart.so")
        # How CMake's compiler check links: nvcc's defaults (static runtime, device runtime).
        main = Path(tmp, "main.cu")
        main.write_text("int main() { return 0; }\n")
        _run_checked(spec, [str(nvcc), f"-arch=sm_{VERIFY_ARCH}", "-o", str(Path(tmp, "main")),
                            str(main)], "linking a program with nvcc's default runtime")


def _cuobjdump(spec: ToolkitSpec, root: Path) -> Path:
    own = root / "bin" / "cuobjdump"
    if own.is_file():
        return own
    if not spec.cuobjdump:
        raise ToolkitError(f"opforge: toolkit {spec.id}: {root} has no bin/cuobjdump to verify "
                           f"with; fix: add cuobjdump: nvidia-cuda-cuobjdump==<version> to "
                           f"toolkits.{spec.id} in matrix.yaml")
    tool_dir = debian.cache_root() / "toolkits" / "tools" / spec.cuobjdump
    found = sorted(tool_dir.glob("nvidia/*/bin/cuobjdump"))
    if not found:
        _pip_install(spec, (spec.cuobjdump,), tool_dir)
        found = sorted(tool_dir.glob("nvidia/*/bin/cuobjdump"))
    if not found:
        raise ToolkitError(f"opforge: toolkit {spec.id}: {spec.cuobjdump} has no bin/cuobjdump")
    return found[0]


def _run_checked(spec: ToolkitSpec, command: list[str], what: str) -> str:
    result = subprocess.run(command, check=False, capture_output=True, text=True)
    if result.returncode != 0:
        raise ToolkitError(f"opforge: toolkit {spec.id}: {what} failed: `{' '.join(command)}`:\n"
                           f"{(result.stderr or result.stdout).strip()[-1500:]}")
    return result.stdout


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
