"""The GPU kernel tests' harness: gpu_shim.cu built with nvcc for this machine's GPU and driven
through ctypes. Without a GPU (or nvcc) every test here is skipped with the reason; with
OPFORGE_REQUIRE_GPU=1 (the GPU check) that is a failure instead."""
from __future__ import annotations

import ctypes
import os
import subprocess
from pathlib import Path

import cuda_tools
import pytest
from cuda_harness import Kernels

import opforge_spec as spec

HERE = Path(__file__).parent


def unavailable(reason: str):
    if os.environ.get("OPFORGE_REQUIRE_GPU") == "1":
        pytest.fail(f"OPFORGE_REQUIRE_GPU=1: {reason}")
    pytest.skip(reason)


def gpu_missing() -> str:
    """Why no CUDA device can run here ('' when one can), asked of the driver directly."""
    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return "no CUDA driver (libcuda.so.1): the GPU kernel tests run on a GPU machine"
    count = ctypes.c_int(0)
    if driver.cuInit(0) != 0 or driver.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value < 1:
        return "the CUDA driver sees no usable GPU"
    return ""


def arch_flags() -> list:
    """OPFORGE_CUDA_ARCHS ("9.0" or "8.0;9.0") when given, else the GPU of this machine."""
    archs = [a for a in os.environ.get("OPFORGE_CUDA_ARCHS", "").replace(",", ";").split(";") if a]
    if not archs:
        return ["-arch=native"]
    return [f"-gencode=arch=compute_{a},code=sm_{a}" for a in (x.replace(".", "") for x in archs)]


def build_shim(folder: Path) -> str:
    nvcc = cuda_tools.find("nvcc")
    if nvcc is None:
        return ""
    out = folder / "libopforge_gpu_shim.so"
    done = subprocess.run([nvcc, "-std=c++17", "-O2", "-shared", "-Xcompiler", "-fPIC",
                           f"-I{spec.include_dir()}", *arch_flags(), str(HERE / "gpu_shim.cu"),
                           "-o", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-4000:]
    return str(out)


@pytest.fixture(scope="session")
def gpu(run_once) -> Kernels:
    missing = gpu_missing()
    if missing:
        unavailable(missing)
    built = run_once("gpu_shim", build_shim)
    if not built:
        unavailable("no nvcc (set OPFORGE_CUDA_HOME) to build the GPU kernel tests' shim")
    lib = ctypes.CDLL(built)
    if lib.opforge_gpu_device_count() < 1:
        unavailable("the CUDA runtime sees no GPU")
    return Kernels(lib)
