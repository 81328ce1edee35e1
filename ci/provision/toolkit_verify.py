"""Verify a toolkit root: compile a cub / <nv/target> kernel for one arch, read its SASS back with
cuobjdump (the toolkit's own, else the pinned wheel's), link it against libcudart."""
from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from ci.model.toolkit_spec import ToolkitError, ToolkitSpec
from ci.provision.debian import cache_root
from ci.provision.toolkit_install import pip_install, progress

# sm_80 is the one architecture every CUDA release from 11.0 to 13.x compiles for.
VERIFY_ARCH = "80"

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


def verify(spec: ToolkitSpec, root: Path) -> None:
    """Compile a cub/<nv/target> kernel for one arch, check its SASS, link it against libcudart."""
    progress(spec, f"verifying: nvcc -arch=sm_{VERIFY_ARCH} on a cub kernel")
    nvcc = root / "bin" / "nvcc"
    with tempfile.TemporaryDirectory(prefix="opforge-toolkit-") as tmp:
        source, obj, shared = Path(tmp, "check.cu"), Path(tmp, "check.o"), Path(tmp, "check.so")
        source.write_text(VERIFY_SOURCE)
        _run_checked(spec, [str(nvcc), "-c", f"-arch=sm_{VERIFY_ARCH}", "-Xcompiler", "-fPIC",
                            "-o", str(obj), str(source)], "compiling a .cu file")
        listing = _run_checked(spec, [str(cuobjdump(spec, root)), "--list-elf", str(obj)],
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


def cuobjdump(spec: ToolkitSpec, root: Path) -> Path:
    own = root / "bin" / "cuobjdump"
    if own.is_file():
        return own
    if not spec.cuobjdump:
        raise ToolkitError(f"opforge: toolkit {spec.id}: {root} has no bin/cuobjdump to verify "
                           f"with; fix: add cuobjdump: nvidia-cuda-cuobjdump==<version> to "
                           f"toolkits.{spec.id} in matrix.yaml")
    tool_dir = cache_root() / "toolkits" / "tools" / spec.cuobjdump
    found = sorted(tool_dir.glob("nvidia/*/bin/cuobjdump"))
    if not found:
        pip_install(spec, (spec.cuobjdump,), tool_dir)
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
