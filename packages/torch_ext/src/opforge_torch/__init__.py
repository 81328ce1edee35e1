"""The opforge ops (every op of opforge_spec) as PyTorch operators.

Importing this package loads ``libopforge_torch.so.1`` (which registers ``torch.ops.opforge.<op>``
for every op, their ``.out`` overloads and backward ops), then adds fake kernels, autograd, ONNX
export symbolics and the Python entry points ``opforge_torch.<op>``.
"""

import json
from functools import lru_cache
from pathlib import Path

import torch

__all__ = ["build_info", "cuda_arch_check", "library_path"]  # and every op (below)
__version__ = "0.1.0"

_HERE = Path(__file__).resolve().parent
_LIB_NAME = "libopforge_torch.so.1"


def _variant_fix() -> str:
    """How to get the build this torch needs: the variant's index (cpu, cu130, ...) or a source
    build; never a checkout path (users install wheels)."""
    cuda = torch.version.cuda
    wanted = f"cu{cuda.replace('.', '')}" if cuda else "cpu"
    return (f"install the opforge-torch variant for this torch ({wanted}; the variants and their "
            "indexes: the opforge README, 'Install'): `pip install --force-reinstall "
            f"--extra-index-url <opforge index>/{wanted}/simple opforge-torch`, or build it "
            "against this torch: `pip install --force-reinstall --no-build-isolation "
            "--no-binary opforge-torch opforge-torch`")


def library_path() -> str:
    """Absolute path of libopforge_torch.so.1 (loadable with ``torch.ops.load_library``)."""
    return str(_HERE / _LIB_NAME)


@lru_cache(maxsize=1)
def build_info() -> dict:
    """What the library was built with: torch_built_against, torch_min, cuda, archs, cxx11_abi, variant."""
    return json.loads((_HERE / "_build_info.json").read_text())


def cuda_arch_check(device=None) -> None:
    """Raises RuntimeError when this build holds no code (SASS or PTX) that ``device`` (default: the
    current CUDA device) runs, naming the GPU, its compute capability, the embedded archs and the
    build that would serve it: the check every CUDA kernel of this library makes before its first
    launch on a device, run here on one element."""
    info = build_info()
    if not info["cuda"]:
        raise RuntimeError(f"opforge_torch: variant {info['variant']} is a CPU-only build: it has no "
                           "CUDA kernels; install a CUDA variant or build with OPFORGE_CUDA_HOME set")
    device = torch.device("cuda") if device is None else torch.device(device)
    torch.ops.opforge.swish(torch.zeros(1, device=device), 1.0)


def _release(version: str) -> tuple:
    return tuple(int(p) for p in version.split("+", maxsplit=1)[0].split(".")[:2])


def _cuda_major(version):
    return None if version is None else version.split(".")[0]


def _check_compatible(info: dict) -> None:
    """Refuses a torch this binary cannot serve, naming both sides and the fix."""
    built = f"variant {info['variant']}, built against torch {info['torch_built_against']}"
    if _release(torch.__version__) < _release(info["torch_min"]):
        raise ImportError(
            f"opforge_torch: this build ({built}) needs torch >= {info['torch_min']}, "
            f"but torch {torch.__version__} is installed. Fix: upgrade torch, or "
            f"{_variant_fix()}"
        )
    if info["cuda"] and _cuda_major(torch.version.cuda) != _cuda_major(info["cuda"]):
        found = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU build"
        raise ImportError(
            f"opforge_torch: this build ({built}) contains CUDA {info['cuda']} kernels, but "
            f"torch {torch.__version__} is {found}. Fix: install a torch built for CUDA "
            f"{_cuda_major(info['cuda'])}.x, or {_variant_fix()}"
        )


def _load() -> None:
    info = build_info()
    _check_compatible(info)
    try:
        torch.ops.load_library(library_path())
    except OSError as err:
        raise ImportError(
            f"opforge_torch: cannot load {library_path()} (variant {info['variant']}, built "
            f"against torch {info['torch_built_against']}, cxx11_abi={info['cxx11_abi']}) into "
            f"torch {torch.__version__} (cxx11_abi={torch._C._GLIBCXX_USE_CXX11_ABI}): {err}. "
            f"Fix: {_variant_fix()}"
        ) from err


_load()

from . import ops  # noqa: E402,F401  (needs the library's schemas; registers fake kernels, autograd)

# isort: split
from . import onnx  # noqa: E402,F401  (after ops: registers the TorchScript exporter symbolics)
from ._ops_generated import *  # noqa: E402,F403  (opforge_torch.<op> for every op of the spec)
from ._ops_generated import __all__ as _OPS  # noqa: E402

__all__.extend(_OPS)
from .hf import patch as patch  # noqa: E402  (opforge_torch.patch: transformers models onto the ops)
