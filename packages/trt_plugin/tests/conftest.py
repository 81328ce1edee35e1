import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import opforge_trt
from opforge_spec.testing import run_once  # noqa: F401  (a fixture: builds shared by xdist workers)

PACKAGE = Path(__file__).resolve().parents[1]
REPO = PACKAGE.parents[1]


def trt_headers():
    """cmake/trt_headers.py as a module: the pin of the TensorRT headers lives there."""
    spec = importlib.util.spec_from_file_location("opforge_trt_headers", PACKAGE / "cmake" / "trt_headers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pytest_report_header(config):
    info = opforge_trt.build_info()
    return (f"opforge_trt {opforge_trt.library_path()} (CUDA {info['cuda_version']} {info['cuda_architectures']}, "
            f"TensorRT headers {info['tensorrt_headers']})")


def cuda_home() -> Path | None:
    for root in (os.environ.get("OPFORGE_CUDA_HOME"), "/usr/local/cuda"):
        if root and (Path(root) / "include" / "cuda_runtime_api.h").is_file():
            return Path(root)
    nvcc = shutil.which("nvcc")
    return Path(nvcc).resolve().parent.parent if nvcc else None


def _fetch_trt_headers(_folder: Path) -> Path:
    done = subprocess.run([sys.executable, str(PACKAGE / "cmake" / "trt_headers.py")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return Path(done.stdout.strip().split(";")[0])


@pytest.fixture(scope="session")
def trt_include_dir(run_once) -> Path:  # noqa: F811  (run_once: the fixture imported above)
    """TensorRT headers: OPFORGE_TRT_INCLUDE_DIR, else the pinned wheel (cached by the build;
    fetched by one worker at a time)."""
    env = os.environ.get("OPFORGE_TRT_INCLUDE_DIR")
    if env:
        return Path(env)
    return run_once("trt_headers", _fetch_trt_headers)


@pytest.fixture(scope="session")
def host(run_once, trt_include_dir) -> Path:  # noqa: F811  (run_once: the fixture imported above)
    """The C++ test host (tests/trt_host.cc), compiled once per test run against the library's
    headers."""
    cxx = shutil.which("g++") or shutil.which("c++")
    home = cuda_home()
    if cxx is None or home is None:
        pytest.skip("no C++ compiler or CUDA toolkit headers to build the test host")
    lib = next((d for d in (home / "lib64", home / "lib") if (d / "libcudart.so").exists()), home / "lib64")

    def compile_host(folder: Path) -> Path:
        out = folder / "trt_host"
        subprocess.run([cxx, "-std=c++17", "-O1", "-Wall", "-isystem", str(trt_include_dir), "-isystem",
                        str(home / "include"), str(PACKAGE / "tests" / "trt_host.cc"), "-o", str(out), "-ldl",
                        f"-L{lib}", "-lcudart", f"-Wl,-rpath,{lib}"], check=True)
        return out
    return run_once("trt_host", compile_host)
