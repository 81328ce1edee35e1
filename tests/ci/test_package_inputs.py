"""Packages take plain inputs: they never read matrix.yaml or import `ci`, a package's
own floor lives in the package and matrix.yaml is checked against it, a missing input stops the
build with a message naming it, and each package builds from its sdist outside the repository
with only the inputs its README documents."""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from ci import model as mx
from ci.provision import debian

REPO = Path(__file__).resolve().parents[2]
PACKAGES = REPO / "packages"
ORT_INPUTS = PACKAGES / "ort_plugin" / "cmake" / "inputs.cmake"
READS_CI = re.compile(r"^\s*(import ci\b|from ci\b)", re.MULTILINE)
# Inputs a caller's environment may hold: each build below sees only the ones it names.
BUILD_KNOBS = ("OPFORGE_", "PYTHONPATH", "CMAKE_ARGS", "SKBUILD_", "CUDA_HOME", "CUDA_PATH", "CUDACXX",
               "TORCH_CUDA_ARCH_LIST", "PIP_CONSTRAINT", "PIP_BUILD_CONSTRAINT")
needs_cmake = pytest.mark.skipif(not shutil.which("cmake") or not shutil.which("c++"),
                                 reason="no cmake or C++ compiler on this machine")


def _package_files() -> list[Path]:
    """Files under packages/ that git tracks or would track (build outputs are ignored)."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "packages"], cwd=REPO,
                            capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip(f"not a git checkout: {listed.stderr.strip()}")
    return [REPO / line for line in listed.stdout.splitlines() if (REPO / line).is_file()]


def test_nothing_under_packages_mentions_matrix_yaml_or_imports_ci():
    offenders = []
    for path in _package_files():
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue  # binary test data
        rel = path.relative_to(REPO)
        offenders += [f"{rel}:{n}: mentions matrix.yaml" for n, line in
                      enumerate(text.splitlines(), 1) if "matrix.yaml" in line]
        offenders += [f"{rel}: imports ci ({m.group(1)!r})" for m in READS_CI.finditer(text)]
    assert not offenders, "packages must take plain inputs:\n" + "\n".join(offenders)


# ----------------------------------------------------------------------- floors live in packages

def ort_api_floor() -> int:
    found = re.search(r"^set\(OPFORGE_ORT_API_FLOOR (\d+)\)", ORT_INPUTS.read_text(), re.MULTILINE)
    assert found, f"{ORT_INPUTS}: expected a line `set(OPFORGE_ORT_API_FLOOR <n>)`"
    return int(found.group(1))


def torch_floor() -> tuple[int, int]:
    setup = PACKAGES / "torch_ext" / "setup.py"
    found = re.search(r"^TORCH_MIN = \((\d+), (\d+)\)", setup.read_text(), re.MULTILINE)
    assert found, f"{setup}: expected a line `TORCH_MIN = (<major>, <minor>)`"
    return int(found.group(1)), int(found.group(2))


def _release(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def test_torch_ext_requires_the_torch_its_setup_checks():
    major, minor = torch_floor()
    pyproject = (PACKAGES / "torch_ext" / "pyproject.toml").read_text()
    assert pyproject.count(f'"torch>={major}.{minor}"') == 2, (
        f"packages/torch_ext/pyproject.toml: build-system.requires and dependencies should both say "
        f"torch>={major}.{minor} (setup.py TORCH_MIN)")


def test_matrix_ort_releases_are_served_by_the_ort_plugin_floor():
    floor = ort_api_floor()
    matrix = mx.load()
    too_old = [v for v in matrix.axes["ort"] if _release(v) < (1, floor)]
    assert not too_old, (f"matrix.yaml: ort: {too_old} are older than ONNX Runtime 1.{floor}, the "
                         f"oldest packages/ort_plugin serves (cmake/inputs.cmake OPFORGE_ORT_API_FLOOR)")
    restated = matrix.data.get("sources", {}).get("ort_min_api")
    assert restated in (None, floor), (
        f"matrix.yaml: sources.ort_min_api: expected the ORT plugin's floor {floor} "
        f"(packages/ort_plugin/cmake/inputs.cmake), got {restated}")


def test_matrix_torch_releases_are_served_by_the_torch_ext_floor():
    floor = torch_floor()
    too_old = [v for v in mx.load().axes["torch"] if _release(v) < floor]
    assert not too_old, (f"matrix.yaml: torch: {too_old} are older than torch {floor[0]}.{floor[1]}, "
                         "the oldest packages/torch_ext supports (setup.py TORCH_MIN)")


# ------------------------------------------------------------------ a missing input is named

def _clean_env(**inputs: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(BUILD_KNOBS)}
    return {**env, **inputs}


def _configure(source: Path, build: Path, *defines: str, **inputs: str) -> subprocess.CompletedProcess:
    command = ["cmake", "-S", str(source), "-B", str(build), f"-DPython_EXECUTABLE={sys.executable}",
               *defines]
    return subprocess.run(command, capture_output=True, text=True, env=_clean_env(**inputs),
                          timeout=300)


@pytest.fixture(scope="module")
def ort_include() -> str:
    """ONNX Runtime's C headers: the caller's OPFORGE_ORT_INCLUDE_DIR, else the Debian package
    matrix.yaml pins (what the nox sessions pass)."""
    given = os.environ.get("OPFORGE_ORT_INCLUDE_DIR")
    if given:
        return given
    try:
        return str(debian.ort_include_dir(mx.load()))
    except (RuntimeError, OSError, subprocess.CalledProcessError) as error:
        pytest.skip(f"no ONNX Runtime headers: {error}")


@needs_cmake
def test_ort_plugin_without_ort_headers_says_which_variable_and_where_to_get_them(tmp_path):
    done = _configure(PACKAGES / "ort_plugin", tmp_path)
    assert done.returncode != 0, "configured without ONNX Runtime headers"
    message = " ".join(done.stderr.split())
    assert "OPFORGE_ORT_INCLUDE_DIR" in message and "onnxruntime_c_api.h" in message, message
    assert "ci.debian --ort-include" in message and "Debian 12 has none" in message, message


@needs_cmake
def test_ort_plugin_refuses_a_min_api_below_its_floor(tmp_path, ort_include):
    done = _configure(PACKAGES / "ort_plugin", tmp_path, "-DOPFORGE_ORT_MIN_API=16",
                      OPFORGE_ORT_INCLUDE_DIR=ort_include)
    assert done.returncode != 0, "configured with OPFORGE_ORT_MIN_API=16"
    message = " ".join(done.stderr.split())
    assert f"OPFORGE_ORT_MIN_API: expected an integer >= {ort_api_floor()}" in message, message


@needs_cmake
@pytest.mark.parametrize("package", ["ort_plugin", "trt_plugin"])
def test_plugin_outside_the_repo_without_kernels_names_the_variable(tmp_path, package, ort_include):
    source = tmp_path / "src" / package
    shutil.copytree(PACKAGES / package, source, ignore=shutil.ignore_patterns("build", "tests"))
    done = _configure(source, tmp_path / "build", OPFORGE_ORT_INCLUDE_DIR=ort_include,
                      OPFORGE_CUDA_HOME="", OPFORGE_CUDA_ARCHS="")
    assert done.returncode != 0, "configured without the shared kernels"
    message = " ".join(done.stderr.split())
    assert "OPFORGE_KERNELS_INCLUDE_DIR" in message and "opforge-spec" in message, message


def _trt_headers_module():
    script = PACKAGES / "trt_plugin" / "cmake" / "trt_headers.py"
    spec = importlib.util.spec_from_file_location("opforge_trt_headers", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cuda_home() -> str:
    """OPFORGE_CUDA_HOME, CUDA_HOME, the toolkit of the nvcc on PATH or CUDA's default root."""
    nvcc = shutil.which("nvcc")
    candidates = [os.environ.get("OPFORGE_CUDA_HOME"), os.environ.get("CUDA_HOME"),
                  str(Path(nvcc).resolve().parents[1]) if nvcc else None, "/usr/local/cuda"]
    for home in filter(None, candidates):
        if all((Path(home) / f).is_file() for f in ("bin/nvcc", "include/cuda_runtime_api.h")):
            return home
    pytest.skip("no CUDA toolkit (OPFORGE_CUDA_HOME, CUDA_HOME, nvcc): the TensorRT plugin needs one")


@needs_cmake
@pytest.mark.parametrize("package", ["ort_plugin", "trt_plugin"])
def test_plugin_outside_the_repo_configures_with_the_documented_inputs(tmp_path, package, request):
    """A copy of the package alone (no matrix.yaml, no ci/, no sibling kernels/) configures from
    its README's inputs; the TensorRT headers come from the package's own pin."""
    source = tmp_path / "src" / package
    shutil.copytree(PACKAGES / package, source, ignore=shutil.ignore_patterns("build", "tests"))
    inputs = {"OPFORGE_KERNELS_INCLUDE_DIR": str(REPO / "kernels" / "include")}
    if package == "ort_plugin":
        inputs["OPFORGE_ORT_INCLUDE_DIR"] = request.getfixturevalue("ort_include")
    else:
        inputs.update(OPFORGE_CUDA_HOME=_cuda_home(), OPFORGE_CUDA_ARCHS="8.0")
    done = _configure(source, tmp_path / "build", **inputs)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    if package == "trt_plugin":
        pin = "".join(_trt_headers_module().PIN)
        assert f"TensorRT 10.14.1, {pin}" in done.stdout, done.stdout[-2000:]


# ------------------------------------------------------------- sdist -> wheel outside the repo

def _run(command: list[str], cwd: Path, env: dict[str, str]) -> None:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, f"`{' '.join(command)}` failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


def _sdist(package: Path, out: Path) -> Path:
    """`python -m build --sdist`. torch_ext's setup.py imports torch even to list its sources, so
    its sdist is made without isolation, in this environment (which has torch), as its README says."""
    pytest.importorskip("build", reason="`python -m build` is not installed here (pip install build)")
    isolation = ["--no-isolation"] if package.name == "torch_ext" else []
    _run([sys.executable, "-m", "build", "--sdist", *isolation, "--outdir", str(out), str(package)],
         cwd=out.parent, env=_clean_env())
    (found,) = out.glob("*.tar.gz")
    return found


def _wheel_from_sdist(sdist: Path, empty: Path, **inputs: str) -> Path:
    """`pip wheel` of the sdist (build isolation: build requirements from the index) in an empty
    folder, seeing only `inputs`; the wheel."""
    empty.mkdir(parents=True)
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "-w",
          str(empty / "wheels"), str(sdist)], cwd=empty, env=_clean_env(**inputs))
    (wheel,) = (empty / "wheels").glob("*.whl")
    return wheel


def _members(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


def _member_json(wheel: Path, member: str) -> dict:
    with zipfile.ZipFile(wheel) as archive:
        return json.loads(archive.read(member))


@pytest.fixture(scope="module")
def spec_find_links(tmp_path_factory) -> str:
    """A folder holding opforge-spec's sdist: what a user without the repository hands pip
    (--find-links / PIP_FIND_LINKS) for the packages' build requirement opforge-spec."""
    work = tmp_path_factory.mktemp("kernels-sdist")
    _sdist(REPO / "kernels", work / "dist")
    return str(work / "dist")


def _this_torch_release() -> str:
    torch = pytest.importorskip("torch", reason="torch_ext's sdist is made with this venv's torch")
    return torch.__version__.split("+")[0]


def _build_torch_constraint(folder: Path) -> str:
    """A pip constraints file pinning the build environment's torch to this venv's release: the
    documented way to choose the torch that `torch>=2.10` (a build requirement) resolves to."""
    folder.mkdir(parents=True, exist_ok=True)
    constraint = folder / "build-constraints.txt"
    constraint.write_text(f"torch=={_this_torch_release()}\n")
    return str(constraint)


# Minutes on 2 cores (pip fetches the build requirements, torch included, then compiles): opt-in.
slow = pytest.mark.skipif(os.environ.get("OPFORGE_SLOW_TESTS") != "1",
                          reason="sdist -> wheel builds take minutes and need PyPI: set OPFORGE_SLOW_TESTS=1")
# package: (a file its wheel must hold, the inputs its README documents for a build without the repo)
SDIST_CASES = {
    "kernels": ("opforge_spec/include/opforge/kernels/math.h", set()),
    "packages/align": ("opforge_align/__init__.py", set()),
    "packages/loader": ("opforge_loader/plugins/libops_opforge_nn.so.1", {"kernels"}),
    "packages/ort_plugin": ("opforge_ort/libopforge_ort.so.1", {"kernels", "ort"}),
    "packages/torch_ext": ("opforge_torch/libopforge_torch.so.1", {"kernels", "torch"}),
    "packages/trt_plugin": ("opforge_trt/libopforge_trt.so.1", {"kernels", "cuda", "trt"}),
}


def _documented_inputs(needs: set[str], request, tmp_path: Path) -> dict[str, str]:
    inputs = {"CMAKE_BUILD_PARALLEL_LEVEL": "2", "MAX_JOBS": "2"}
    if "kernels" in needs:
        inputs["PIP_FIND_LINKS"] = request.getfixturevalue("spec_find_links")
    if "ort" in needs:
        inputs["OPFORGE_ORT_INCLUDE_DIR"] = request.getfixturevalue("ort_include")
    if "torch" in needs:  # CPU-only: no OPFORGE_CUDA_HOME
        inputs["PIP_BUILD_CONSTRAINT"] = _build_torch_constraint(tmp_path / "constraints")
    if "cuda" in needs:
        inputs.update(OPFORGE_CUDA_HOME=_cuda_home(), OPFORGE_CUDA_ARCHS="8.0")
    if "trt" in needs:  # no OPFORGE_TRT_INCLUDE_DIR: the build fetches its pinned headers
        inputs["OPFORGE_CACHE"] = str(tmp_path / "opforge-cache")
    return inputs


@slow
@needs_cmake
@pytest.mark.parametrize("package", list(SDIST_CASES))
def test_sdist_builds_a_wheel_outside_the_repo(tmp_path, request, package):
    expected, needs = SDIST_CASES[package]
    inputs = _documented_inputs(needs, request, tmp_path)
    sdist = _sdist(REPO / package, tmp_path / "dist")
    wheel = _wheel_from_sdist(sdist, tmp_path / "empty", **inputs)
    files = _members(wheel)
    assert expected in files, f"{package}: the wheel built from {sdist.name} lacks {expected}: {files}"
    if package == "packages/torch_ext":
        info = _member_json(wheel, "opforge_torch/_build_info.json")
        assert info["cuda"] is None and info["torch_built_against"].startswith(_this_torch_release()), (
            f"{wheel.name}: expected a CPU-only build against torch {_this_torch_release()} (the "
            f"constraint), got {info}")
    if package == "packages/trt_plugin":
        info = _member_json(wheel, "opforge_trt/build_info.json")
        pin = "".join(_trt_headers_module().PIN)
        assert (info["cuda_architectures"], info["tensorrt_headers_source"]) == (["80-real"], pin), info


def _toolkit_cuda_release(home: str) -> str:
    shown = subprocess.run([f"{home}/bin/nvcc", "--version"], capture_output=True, text=True).stdout
    found = re.search(r"release (\d+\.\d+)", shown)
    assert found, f"{home}/bin/nvcc --version: expected `release <major>.<minor>`, got {shown!r}"
    return found.group(1)


def _cuda_torch_constraint(folder: Path, cuda: str) -> str:
    """Build constraints pinning the torch that matrix.yaml lists for this CUDA release: torch's
    pip CUDA headers come before the toolkit's, and nvcc refuses headers of a newer minor
    (`CUDA compiler and CUDA toolkit headers are incompatible`, seen with torch cu132 and nvcc 13.0)."""
    pins = next((entry["packages"] for entry in mx.load().axes["torch"].values()
                 if entry["cuda"] == cuda), None)
    if not pins:
        pytest.skip(f"matrix.yaml lists no torch built with CUDA {cuda}, the toolkit's release")
    folder.mkdir(parents=True, exist_ok=True)
    constraint = folder / "build-constraints.txt"
    constraint.write_text("\n".join(pins) + "\n")
    return str(constraint)


@slow
def test_torch_ext_sdist_builds_cuda_kernels_with_a_torch_of_the_toolkits_cuda(tmp_path, request):
    """The CUDA variant: OPFORGE_CUDA_HOME and OPFORGE_CUDA_ARCHS, and in the isolated build
    environment the build requirement `torch>=2.10` pinned to a torch of the toolkit's CUDA release."""
    home = _cuda_home()
    inputs = {"MAX_JOBS": "2", "OPFORGE_CUDA_HOME": home, "OPFORGE_CUDA_ARCHS": "8.0",
              "PIP_FIND_LINKS": request.getfixturevalue("spec_find_links"),
              "PIP_BUILD_CONSTRAINT": _cuda_torch_constraint(tmp_path / "constraints",
                                                             _toolkit_cuda_release(home))}
    sdist = _sdist(PACKAGES / "torch_ext", tmp_path / "dist")
    wheel = _wheel_from_sdist(sdist, tmp_path / "empty", **inputs)
    info = _member_json(wheel, "opforge_torch/_build_info.json")
    assert info["cuda"] and info["archs"] == ["8.0"], f"{wheel.name}: expected a CUDA build for 8.0, got {info}"
    with zipfile.ZipFile(wheel) as archive:
        library = Path(archive.extract("opforge_torch/libopforge_torch.so.1", tmp_path / "unpacked"))
    sections = subprocess.run(["readelf", "-S", "-W", str(library)], capture_output=True, text=True).stdout
    assert ".nv_fatbin" in sections, f"{library.name} from {wheel.name}: no .nv_fatbin section (no CUDA code)"


@needs_cmake
def test_loader_names_a_missing_zig(tmp_path):
    done = _configure(PACKAGES / "loader", tmp_path, OPFORGE_ZIG=str(tmp_path / "no-zig"))
    message = " ".join(done.stderr.split())
    assert done.returncode != 0 and f"OPFORGE_ZIG={tmp_path / 'no-zig'}: expected a zig executable" in message, message


@needs_cmake
def test_loader_refuses_a_malformed_glibc_target(tmp_path):
    zig = tmp_path / "zig"
    zig.write_text("#!/bin/sh\nexit 1\n")  # configure stops at OPFORGE_GLIBC, before zig runs
    done = _configure(PACKAGES / "loader", tmp_path / "build", OPFORGE_ZIG=str(zig), OPFORGE_GLIBC="2_28")
    message = " ".join(done.stderr.split())
    assert done.returncode != 0 and "OPFORGE_GLIBC: expected a glibc version like 2.28, got '2_28'" in message, message
