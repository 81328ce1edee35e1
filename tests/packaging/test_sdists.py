"""Each package builds from its own sdist with only its declared inputs.

The shared kernels and build support live in ONE place, opforge-spec (kernels/): its wheel is the
CMake package opforge_kernels (kernels/cmake; scikit-build-core entry point `cmake.root`) and the
dynamic-metadata provider `opforge_variant` (opforge_spec/variant.py; entry point group
`dynamic_metadata.provider`). Every package that
compiles the kernels lists `opforge-spec==<the repo's version>` in its [build-system] requires and
finds it with find_package(opforge_kernels CONFIG): no package carries a copy.

Fast tests (seconds) check the declarations, that no copy is left and that the opforge-spec wheel's
CMake package configures a project. Then each package's sdist is made and a wheel built FROM THAT
SDIST in an empty folder outside the repository, seeing no OPFORGE_KERNELS_INCLUDE_DIR and no
repository path: only `--find-links` to opforge-spec's wheel and sdist (it is not on PyPI) and the
inputs each README documents (the ORT headers, a CUDA toolkit for the TensorRT plugin). These need
`python -m build` and PyPI (the build requirements); align, loader and ort_plugin take seconds and
always run, trt_plugin and torch_ext only with OPFORGE_SLOW_TESTS=1. Each build prints its time
(pytest -s).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import pytest
import tomllib

REPO = Path(__file__).resolve().parents[2]
KERNELS = REPO / "kernels"
PACKAGES = REPO / "packages"
# packages whose build compiles the shared kernels: they need opforge-spec at build time
KERNEL_USERS = ("loader", "ort_plugin", "trt_plugin", "torch_ext")
CMAKE_USERS = ("loader", "ort_plugin", "trt_plugin")
# Inputs a caller's environment may hold: each build below sees none of them but those it names.
BUILD_KNOBS = ("OPFORGE_", "PYTHONPATH", "CMAKE_ARGS", "CMAKE_PREFIX_PATH", "SKBUILD_", "CUDA_HOME",
               "CUDA_PATH", "CUDACXX", "TORCH_CUDA_ARCH_LIST", "PIP_CONSTRAINT", "PIP_BUILD_CONSTRAINT",
               "opforge_kernels_")
needs_cmake = pytest.mark.skipif(not shutil.which("cmake") or not shutil.which("c++"),
                                 reason="no cmake or C++ compiler on this machine")
slow = pytest.mark.skipif(os.environ.get("OPFORGE_SLOW_TESTS") != "1",
                          reason="the trt_plugin (a CUDA toolkit) and torch_ext (torch into the build env, ~70 s) sdist builds: set OPFORGE_SLOW_TESTS=1")


def _toml(path: Path) -> dict:
    return tomllib.loads(path.read_text())


def spec_version() -> str:
    return _toml(KERNELS / "pyproject.toml")["project"]["version"]


def _build_requires(package: str) -> list[str]:
    return _toml(PACKAGES / package / "pyproject.toml")["build-system"]["requires"]


# ------------------------------------------------------------------------- declarations (fast)

@pytest.mark.parametrize("package", KERNEL_USERS)
def test_a_package_that_compiles_the_kernels_requires_opforge_spec_of_this_release(package):
    wanted = f"opforge-spec=={spec_version()}"
    assert wanted in _build_requires(package), (
        f"packages/{package}/pyproject.toml: [build-system] requires should list {wanted!r} "
        f"(kernels/pyproject.toml's version), got {_build_requires(package)}")


@pytest.mark.parametrize("package", CMAKE_USERS)
def test_a_cmake_package_finds_opforge_kernels_of_this_release(package):
    text = (PACKAGES / package / "CMakeLists.txt").read_text()
    asked = set(re.findall(r"find_package\(opforge_kernels ([0-9.]+) CONFIG", text))
    assert asked == {spec_version()}, (
        f"packages/{package}/CMakeLists.txt: expected find_package(opforge_kernels {spec_version()} CONFIG ...), "
        f"found versions {asked or 'none'}")


def test_the_cmake_package_version_is_opforge_specs():
    config = (KERNELS / "cmake" / "opforge_kernelsConfigVersion.cmake").read_text()
    found = re.search(r'^set\(PACKAGE_VERSION "([^"]+)"\)', config, re.MULTILINE)
    assert found and found.group(1) == spec_version(), (
        f"kernels/cmake/opforge_kernelsConfigVersion.cmake: PACKAGE_VERSION should be {spec_version()} "
        f"(kernels/pyproject.toml), got {found and found.group(1)}")


def test_opforge_spec_declares_its_cmake_package_and_the_variant_provider():
    entry_points = _toml(KERNELS / "pyproject.toml")["project"]["entry-points"]
    assert entry_points.get("cmake.root") == {"opforge_kernels": "opforge_spec"}, entry_points
    assert entry_points.get("dynamic_metadata.provider") == {
        "opforge_variant": "opforge_spec.variant"}, entry_points
    assert (KERNELS / "opforge_spec" / "variant.py").is_file()
    for package in ("ort_plugin", "trt_plugin"):
        providers = [entry.get("provider") for entry in
                     _toml(PACKAGES / package / "pyproject.toml")["tool"]["dynamic-metadata"]]
        assert providers == ["opforge_variant"], f"packages/{package}/pyproject.toml: {providers}"


def test_one_scikit_build_core_pin_for_every_package():
    pins = {}
    for pyproject in sorted(PACKAGES.glob("*/pyproject.toml")):
        for requirement in _toml(pyproject)["build-system"]["requires"]:
            if re.match(r"scikit-build-core\b", requirement):
                pins[pyproject.parent.name] = requirement
    assert len(pins) >= 3 and len(set(pins.values())) == 1, f"scikit-build-core pins differ: {pins}"
    assert all(re.fullmatch(r"scikit-build-core==[0-9.]+", pin) for pin in pins.values()), pins


def _tracked(folder: Path) -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", str(folder)], cwd=REPO,
                            capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip(f"not a git checkout: {listed.stderr.strip()}")
    return [REPO / line for line in listed.stdout.splitlines() if (REPO / line).is_file()]


def test_no_package_carries_a_copy_of_the_shared_build_support():
    """kernels.cmake and opforge_variant.py used to be copied into ort_plugin and trt_plugin (and a
    test kept the copies equal): now no file under packages/ repeats one of kernels/cmake, and no two
    packages share a build file (the *_generated.cmake files, written from the op spec, aside)."""
    shared = {path.read_bytes(): path for path in _tracked(KERNELS / "cmake")}
    seen: dict[bytes, Path] = {}
    copies = []
    for path in _tracked(PACKAGES):
        rel = path.relative_to(PACKAGES)
        if len(rel.parts) < 3 or rel.parts[1] not in ("cmake", "build_support"):
            continue
        if path.name.endswith("_generated.cmake"):
            continue
        data = path.read_bytes()
        if data in shared:
            copies.append(f"packages/{rel} is a copy of {shared[data].relative_to(REPO)}")
        elif data in seen and seen[data].relative_to(PACKAGES).parts[0] != rel.parts[0]:
            copies.append(f"packages/{rel} is a copy of {seen[data].relative_to(REPO)}")
        seen.setdefault(data, path)
    for name in ("cmake/kernels.cmake", "build_support/opforge_variant.py"):
        copies += [f"{p.relative_to(REPO)} exists (opforge-spec ships it)" for p in PACKAGES.glob(f"*/{name}")]
    assert not copies, "\n".join(copies)


# --------------------------------------------------------- opforge-spec's wheel as a CMake package

def _clean_env(**inputs: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(BUILD_KNOBS)}
    return {**env, **inputs}


def _run(command: list[str], cwd: Path, env: dict[str, str], timeout: int = 1800) -> subprocess.CompletedProcess:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"`{' '.join(command)}` failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done


@pytest.fixture(scope="module")
def spec_wheel(tmp_path_factory) -> Path:
    """opforge-spec's wheel, built from kernels/ (hatchling from PyPI, seconds)."""
    out = tmp_path_factory.mktemp("spec-wheel")
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-cache-dir", "--disable-pip-version-check",
          "-w", str(out), str(KERNELS)], cwd=out, env=_clean_env(), timeout=600)
    (wheel,) = out.glob("opforge_spec-*.whl")
    return wheel


def test_the_spec_wheel_ships_the_cmake_package_and_the_provider(spec_wheel):
    with zipfile.ZipFile(spec_wheel) as archive:
        names = set(archive.namelist())
        entry_points = next(archive.read(n).decode() for n in names if n.endswith(".dist-info/entry_points.txt"))
    for member in ("opforge_spec/cmake/opforge_kernelsConfig.cmake", "opforge_spec/cmake/opforge_kernelsConfigVersion.cmake",
                   "opforge_spec/cmake/opforge_package.cmake", "opforge_spec/cmake/opforge_cuda_archs.cmake",
                   "opforge_spec/cmake/opforge_kernels_ops.cmake",  # the spec's ops, for the packages' CMake
                   "opforge_spec/variant.py", "opforge_spec/include/opforge/kernels/math.h"):
        assert member in names, f"{spec_wheel.name} lacks {member}"
    assert "[cmake.root]\nopforge_kernels = opforge_spec" in entry_points, entry_points
    assert "[dynamic_metadata.provider]\nopforge_variant = opforge_spec.variant" in entry_points, entry_points


@needs_cmake
def test_find_package_opforge_kernels_in_the_installed_spec(spec_wheel, tmp_path):
    """What scikit-build-core does with the entry point (opforge_kernels_ROOT = the installed
    opforge_spec folder), on the unpacked wheel, away from the repository."""
    with zipfile.ZipFile(spec_wheel) as archive:
        archive.extractall(tmp_path / "site")
    project = tmp_path / "project"
    project.mkdir()
    (project / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.20)\n"
        "find_package(opforge_kernels 0.1 CONFIG REQUIRED)  # before project(): the CUDA helpers are usable there\n"
        "opforge_input(DEMO_INPUT default)\n"
        "opforge_cuda_architectures(demo \"8.0;9.0\" archs)\n"
        "project(demo LANGUAGES CXX)\n"
        "add_library(demo STATIC demo.cc)\n"
        "target_link_libraries(demo PRIVATE opforge::kernels)\n"
        "opforge_platform_floor(demo)\n"
        "message(STATUS \"demo: ${OPFORGE_KERNELS_INCLUDE_DIR} ${opforge_kernels_VERSION} ${archs} ${DEMO_INPUT}\")\n"
        "message(STATUS \"demo ops: ${OPFORGE_KERNELS_DOMAIN} ${OPFORGE_KERNELS_DOMAIN_VERSION} ${OPFORGE_KERNELS_OPS}\")\n")
    (project / "demo.cc").write_text("#include <opforge/kernels/math.h>\nint demo() { return 0; }\n")
    root = tmp_path / "site" / "opforge_spec"
    done = _run(["cmake", "-S", str(project), "-B", str(tmp_path / "build"), f"-Dopforge_kernels_ROOT={root}"],
                cwd=tmp_path, env=_clean_env(DEMO_INPUT="from-env"), timeout=300)
    assert f"demo: {root / 'include'} {spec_version()} 80-real;90 from-env" in done.stdout, done.stdout[-2000:]
    ops = re.search(r"set\(OPFORGE_KERNELS_OPS ([^)]*)\)", (KERNELS / "cmake" / "opforge_kernels_ops.cmake").read_text())
    assert f"demo ops: opforge 1 {ops[1].replace(' ', ';')}" in done.stdout, done.stdout[-2000:]
    _run(["cmake", "--build", str(tmp_path / "build")], cwd=tmp_path, env=_clean_env(), timeout=300)


@needs_cmake
def test_the_loader_without_the_kernels_stops_naming_the_option(tmp_path):
    """No silent skip of the nn plugin: a copy of the loader outside the repo with no opforge-spec
    stops at configure time, naming the way out (-DOPFORGE_LOADER_NN=OFF), which then says so."""
    source = tmp_path / "src" / "loader"
    shutil.copytree(PACKAGES / "loader", source, ignore=shutil.ignore_patterns("build", "tests", "*.egg-info"))
    command = ["cmake", "-S", str(source), f"-DPython_EXECUTABLE={sys.executable}"]
    done = subprocess.run([*command, "-B", str(tmp_path / "b1")], capture_output=True, text=True,
                          env=_clean_env(), timeout=300)
    message = " ".join(done.stderr.split())
    if "nlohmann-json" in message and "not found" in message:
        pytest.skip("no nlohmann-json for this Python (pip install nlohmann-json==3.12.0): configure stops before the kernels")
    assert done.returncode != 0, "configured without the kernels"
    assert "libops_opforge_nn.so.1 needs the shared kernels" in message and "-DOPFORGE_LOADER_NN=OFF" in message, message
    assert "opforge-spec==0.1.0" in message and "OPFORGE_KERNELS_INCLUDE_DIR" in message, message
    done = subprocess.run([*command, "-B", str(tmp_path / "b2"), "-DOPFORGE_LOADER_NN=OFF"], capture_output=True,
                          text=True, env=_clean_env(), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "libops_opforge_nn.so.1 NOT built: OPFORGE_LOADER_NN=OFF" in done.stdout, done.stdout[-2000:]


# ------------------------------------------------------------ sdist -> wheel outside the repo (slow)

@pytest.fixture(scope="module")
def links(tmp_path_factory) -> Path:
    """A --find-links folder with opforge-spec's sdist and wheel (it is not on PyPI): the only way
    the builds below get the kernels."""
    pytest.importorskip("build", reason="`python -m build` is not installed here (pip install build)")
    out = tmp_path_factory.mktemp("links")
    _run([sys.executable, "-m", "build", "--outdir", str(out), str(KERNELS)], cwd=out, env=_clean_env(), timeout=600)
    assert sorted(p.suffix for p in out.iterdir()) == [".gz", ".whl"], list(out.iterdir())
    return out


def _ort_include() -> str:
    given = os.environ.get("OPFORGE_ORT_INCLUDE_DIR")
    if given:
        return given
    # the headers CI builds with: what `python -m ci.debian --ort-include` prints (its README)
    bootstrap = REPO / ".nox" / "_bootstrap" / "bin" / "python"  # python3 ci/bootstrap.py --version makes it
    python = str(bootstrap) if bootstrap.is_file() else sys.executable
    done = subprocess.run([python, "-m", "ci.debian", "--ort-include"], cwd=REPO, capture_output=True,
                          text=True, timeout=600)
    folder = done.stdout.strip().splitlines()[-1] if done.returncode == 0 and done.stdout.strip() else ""
    if not (Path(folder) / "onnxruntime_c_api.h").is_file():
        pytest.skip(f"no ONNX Runtime headers (set OPFORGE_ORT_INCLUDE_DIR): `python -m ci.debian --ort-include` "
                    f"exited {done.returncode}: {done.stderr.strip()[-300:]}")
    return folder


def _cuda_home() -> str:
    nvcc = shutil.which("nvcc")
    for home in filter(None, [os.environ.get("OPFORGE_CUDA_HOME"), os.environ.get("CUDA_HOME"),
                              str(Path(nvcc).resolve().parents[1]) if nvcc else None, "/usr/local/cuda"]):
        if all((Path(home) / f).is_file() for f in ("bin/nvcc", "include/cuda_runtime_api.h")):
            return home
    pytest.skip("no CUDA toolkit (OPFORGE_CUDA_HOME, CUDA_HOME, nvcc): the TensorRT plugin needs one")


def _torch_constraint(folder: Path) -> str:
    """Build constraints pinning the isolated build's torch (`torch>=2.10`) to this venv's release.
    pip reads PIP_BUILD_CONSTRAINT from 25.3 on; an older pip ignores it and would fill the build
    environment with the newest torch and its CUDA wheels (GBs)."""
    torch = pytest.importorskip("torch", reason="torch_ext's sdist is made with this environment's torch")
    from pip import __version__ as pip_version

    if tuple(int(part) for part in pip_version.split(".")[:2]) < (25, 3):
        pytest.skip(f"pip {pip_version} < 25.3 ignores PIP_BUILD_CONSTRAINT (the build's torch pin)")
    folder.mkdir(parents=True, exist_ok=True)
    constraint = folder / "build-constraints.txt"
    constraint.write_text(f"torch=={torch.__version__.split('+')[0]}\n")
    return str(constraint)


# package: (a file its wheel must hold, the inputs its README documents beyond opforge-spec)
SDIST_CASES = {
    "align": ("opforge_align/__init__.py", set()),
    "loader": ("opforge_loader/plugins/libops_opforge_nn.so.1", set()),
    "ort_plugin": ("opforge_ort/libopforge_ort.so.1", {"ort"}),
    "trt_plugin": ("opforge_trt/libopforge_trt.so.1", {"cuda"}),
    "torch_ext": ("opforge_torch/libopforge_torch.so.1", {"torch"}),
}


def _find_links(links: Path) -> str:
    """opforge-spec's folder before the caller's own pip settings (a user's, such as a local wheel
    of torch), which stay."""
    return " ".join(filter(None, [str(links), os.environ.get("PIP_FIND_LINKS", "")]))


def _inputs(needs: set[str], links: Path, tmp_path: Path) -> dict[str, str]:
    inputs = {"PIP_FIND_LINKS": _find_links(links), "CMAKE_BUILD_PARALLEL_LEVEL": "2", "MAX_JOBS": "2"}
    if "ort" in needs:
        inputs["OPFORGE_ORT_INCLUDE_DIR"] = _ort_include()
    if "cuda" in needs:  # the TensorRT headers: the package's own pin (cmake/trt_headers.py)
        inputs.update(OPFORGE_CUDA_HOME=_cuda_home(), OPFORGE_CUDA_ARCHS="8.0",
                      OPFORGE_CACHE=str(tmp_path / "opforge-cache"))
    if "torch" in needs:  # CPU-only: no OPFORGE_CUDA_HOME
        inputs["PIP_BUILD_CONSTRAINT"] = _torch_constraint(tmp_path / "constraints")
    return inputs


# Measured on 2 shared cores, wheel from the sdist: align 1 s, loader 12 s, ort_plugin 7 s (these
# run by default: they need PyPI for hatchling, scikit-build-core and nlohmann-json); trt_plugin
# 15 s but a CUDA toolkit, torch_ext 68 s (it installs torch into the build environment): slow.
CHEAP = ("align", "loader", "ort_plugin")


@needs_cmake
@pytest.mark.parametrize("package", [p if p in CHEAP else pytest.param(p, marks=slow) for p in SDIST_CASES])
def test_the_sdist_builds_a_wheel_in_an_empty_folder(package, links, tmp_path):
    expected, needs = SDIST_CASES[package]
    inputs = _inputs(needs, links, tmp_path)
    # torch_ext's setup.py imports torch even to list its sources: its sdist is made without
    # isolation, in this environment (its README says so; making the sdist needs no opforge-spec
    # installed, its wheel does); every other sdist in isolation.
    isolation = ["--no-isolation", "--skip-dependency-check"] if package == "torch_ext" else []
    started = time.monotonic()
    _run([sys.executable, "-m", "build", "--sdist", *isolation, "--outdir", str(tmp_path / "dist"),
          str(PACKAGES / package)], cwd=tmp_path, env=_clean_env(PIP_FIND_LINKS=_find_links(links)))
    sdist_s = time.monotonic() - started
    (sdist,) = (tmp_path / "dist").glob("*.tar.gz")
    with tarfile.open(sdist) as archive:  # each package derives its declarations when it builds
        generated = [n for n in archive.getnames() if re.search(r"_generated\.(py|h)$", n)]
    assert not generated, f"{package}: {sdist.name} carries generated files: {generated}"
    empty = tmp_path / "empty"
    empty.mkdir()
    started = time.monotonic()
    done = _run([sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-cache-dir",
                 "--disable-pip-version-check", "-w", str(empty / "wheels"), str(sdist)],
                cwd=empty, env=_clean_env(**inputs))
    wheel_s = time.monotonic() - started
    print(f"\n{package}: sdist {sdist_s:.0f} s, wheel from the sdist {wheel_s:.0f} s")
    log = done.stdout + done.stderr
    # (the interpreter running the tests may live in the checkout, as CI's venvs do: not its sources)
    read = [folder for folder in (KERNELS, PACKAGES) if str(folder) in log]
    assert not read, f"{package}: the build read the repository ({read}):\n{log[-3000:]}"
    (wheel,) = (empty / "wheels").glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = {n: json.loads(archive.read(n)) for n in names if n.endswith("build_info.json")}
    assert expected in names, f"{package}: {wheel.name} (from {sdist.name}) lacks {expected}: {names}"
    if package in CMAKE_USERS:
        assert re.search(r"kernels \S+/site-packages/opforge_spec/include", log), (
            f"{package}: expected the kernels of the build requirement opforge-spec:\n{log[-3000:]}")
    if package == "trt_plugin":
        assert info["opforge_trt/build_info.json"]["cuda_architectures"] == ["80"], info  # SASS + PTX
    if package == "torch_ext":
        assert info["opforge_torch/_build_info.json"]["cuda"] is None, info
        # its build wrote the entry points from the build requirement opforge-spec (gen_schema.py)
        assert "opforge_torch/_ops_generated.py" in names, names
