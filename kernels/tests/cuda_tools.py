"""The CUDA tools the kernel tests use, found the way the CI stages provide them: an OPFORGE_<NAME>
variable, the cell's toolkit (OPFORGE_CUDA_HOME), PATH, the standard toolkit root, or a pip CUDA
package in this Python's environment (nvidia-cuda-nvdisasm, nvidia-cuda-cuobjdump)."""
from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from pathlib import Path


def _site_packages() -> list:
    paths = {sysconfig.get_paths()[key] for key in ("purelib", "platlib")}
    return [Path(p) for p in sorted(paths)] + [Path(p) for p in sys.path if p.endswith("site-packages")]


def find(name: str) -> str | None:
    named = os.environ.get(f"OPFORGE_{name.upper()}", "")
    homes = [os.environ.get("OPFORGE_CUDA_HOME"), os.environ.get("CUDA_HOME"), "/usr/local/cuda"]
    candidates = [named, *(h and str(Path(h) / "bin" / name) for h in homes), shutil.which(name)]
    for site in _site_packages():
        candidates += [str(p) for p in sorted(site.glob(f"nvidia/*/bin/{name}"))]
    return next((c for c in candidates if c and Path(c).is_file() and os.access(c, os.X_OK)), None)


def toolkit_include() -> Path | None:
    """The CUDA toolkit's include/ (cuda_runtime.h, cuda_fp16.h, cuda_bf16.h)."""
    homes = [os.environ.get("OPFORGE_CUDA_HOME"), os.environ.get("CUDA_HOME"), "/usr/local/cuda"]
    nvcc = find("nvcc")
    homes.append(nvcc and str(Path(nvcc).resolve().parent.parent))
    return next((Path(h) / "include" for h in homes
                 if h and (Path(h) / "include" / "cuda_runtime.h").is_file()), None)
