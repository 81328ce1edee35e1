"""CUDA code generation: SASS for each requested arch plus PTX for the highest (checked with cuobjdump,
no GPU needed), and the arch guard's Python entry."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import opforge_torch

CSRC = Path(__file__).resolve().parent.parent / "csrc"
ARCHS = ("80", "90")


def _cuda_home():
    # CUDA_HOME too: docker/run.sh --cuda DIR mounts the toolkit at DIR and names it only there
    names = ("OPFORGE_CUDA_HOME", "CUDA_HOME", "CUDA_PATH")
    for root in (*(os.environ.get(name) for name in names), "/usr/local/cuda"):
        if root and (Path(root) / "bin" / "nvcc").is_file():
            return Path(root)
    nvcc = shutil.which("nvcc")
    return Path(nvcc).resolve().parent.parent if nvcc else None


def _cuobjdump():
    """cuobjdump from: OPFORGE_CUOBJDUMP, the toolkit, PATH, or a pip CUDA package in this env."""
    home = _cuda_home()
    site = Path(torch.__file__).resolve().parent.parent
    candidates = [os.environ.get("OPFORGE_CUOBJDUMP"), home and home / "bin" / "cuobjdump",
                  shutil.which("cuobjdump"), site / "nvidia" / "cu13" / "bin" / "cuobjdump",
                  site / "nvidia" / "cuda_cuobjdump" / "bin" / "cuobjdump",
                  site / "triton" / "backends" / "nvidia" / "bin" / "cuobjdump"]
    for c in candidates:
        if c and Path(c).is_file():
            return str(c)
    pytest.skip("no cuobjdump (set OPFORGE_CUOBJDUMP or install nvidia-cuda-cuobjdump)")


def _elf_archs(binary):
    out = subprocess.run([_cuobjdump(), "--list-elf", str(binary)], capture_output=True,
                         text=True, check=True).stdout
    return sorted(set(re.findall(r"\.sm_(\d+[af]?)\.cubin", out)))


def _ptx_archs(binary):
    # cuobjdump exits 255 ("No PTX file found") when there is none: an empty list, not an error.
    out = subprocess.run([_cuobjdump(), "--list-ptx", str(binary)], capture_output=True, text=True).stdout
    return sorted(set(re.findall(r"\.sm_(\d+[af]?)\.ptx", out)))


def test_installed_library_has_sass_for_its_archs():
    info = opforge_torch.build_info()
    if not info["cuda"]:
        pytest.skip("CPU-only build (no OPFORGE_CUDA_HOME); the nvcc compile test covers CUDA")
    wanted = sorted(a.replace(".", "").replace("+PTX", "") for a in info["archs"])
    assert set(wanted) <= set(_elf_archs(opforge_torch.library_path())) and sorted(info["sass"]) == \
        _elf_archs(opforge_torch.library_path())


def test_installed_library_has_ptx_for_its_highest_arch():
    """Newer GPUs than the list (sm_100, sm_120) JIT the PTX of its highest arch."""
    info = opforge_torch.build_info()
    if not info["cuda"]:
        pytest.skip("CPU-only build (no OPFORGE_CUDA_HOME); the nvcc compile test covers CUDA")
    highest = max(info["archs"], key=lambda a: tuple(int(p) for p in a.split("+")[0].rstrip("af").split(".")))
    marked = [a.split("+")[0].replace(".", "") for a in info["archs"] if a.endswith("+PTX")]
    wanted = sorted(marked or [highest.rstrip("af").replace(".", "")])
    assert info["ptx"] == wanted and _ptx_archs(opforge_torch.library_path()) == wanted


def test_cuda_arch_check_refuses_a_cpu_build_or_passes_on_this_gpu():
    if not opforge_torch.build_info()["cuda"]:
        with pytest.raises(RuntimeError, match="CPU-only build"):
            opforge_torch.cuda_arch_check()
    elif not torch.cuda.is_available():
        pytest.skip("CUDA build, but no GPU here to check")
    else:
        opforge_torch.cuda_arch_check()  # the matrix builds for the GPUs it runs on


def test_nvcc_compiles_the_cuda_kernels_for_sm80_and_sm90_plus_ptx(tmp_path):
    """The CUDA translation unit includes only stable-ABI headers, so any torch's headers do."""
    if opforge_torch.build_info()["cuda"]:
        pytest.skip("the installed library is a CUDA build: its SASS is checked directly")
    home = _cuda_home()
    if home is None:
        pytest.skip("no nvcc (set OPFORGE_CUDA_HOME or CUDA_HOME)")
    _cuobjdump()  # skip before a compile whose result could not be checked
    import opforge_spec

    include = CSRC.parent.parent.parent / "kernels" / "include"
    include = include if include.is_dir() else Path(opforge_spec.include_dir())
    obj = tmp_path / "cuda_ops.o"
    cmd = [str(home / "bin" / "nvcc"), "-c", str(CSRC / "cuda_ops.cu"), "-o", str(obj),
           "-std=c++20", "-O2", "-DUSE_CUDA", "-DTORCH_STABLE_ONLY",
           "-DTORCH_TARGET_VERSION=0x020a000000000000", "-Xcompiler=-fPIC",
           f"-I{include}", f"-I{Path(torch.__file__).parent / 'include'}",
           f"-DOPFORGE_CUDA_SASS_ARCHS={'_'.join(ARCHS)}", f"-DOPFORGE_CUDA_PTX_ARCHS={ARCHS[-1]}",
           *[f"-gencode=arch=compute_{a},code=sm_{a}" for a in ARCHS],
           f"-gencode=arch=compute_{ARCHS[-1]},code=compute_{ARCHS[-1]}"]  # what setup.py's +PTX adds
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    assert _elf_archs(obj) == list(ARCHS)
    assert _ptx_archs(obj) == [ARCHS[-1]]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
