"""Build libopforge_torch.so.1 against the LibTorch stable ABI (torch >= 2.10).

Knobs (environment):
  OPFORGE_CUDA_HOME     toolkit root (bin/nvcc); unset or empty -> CPU-only build
  OPFORGE_CUDA_ARCHS    TORCH_CUDA_ARCH_LIST syntax, e.g. "8.0;9.0" (default "8.0;9.0")
  OPFORGE_KERNELS_INCLUDE_DIR  kernels/include of the shared math (default: the checkout's, then
                        the installed opforge_spec's)
  MAX_JOBS              parallel compile jobs (default 2)
"""

import json
import os
import sys
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).resolve().parent
LIB_NAME = "libopforge_torch.so.1"
# Oldest torch whose stable ABI has what the kernels need (parallel_for, empty/new_zeros, contiguous, to).
TORCH_MIN = (2, 10)
DEFAULT_ARCHS = "8.0;9.0"


def log(msg):
    print(f"[opforge-torch] {msg}", file=sys.stderr, flush=True)


def cuda_home():
    home = os.environ.get("OPFORGE_CUDA_HOME", "").strip()
    if home:
        # Before importing cpp_extension: it reads CUDA_HOME once, and its autodetection can pick
        # a wrapper directory instead of the toolkit.
        os.environ["CUDA_HOME"] = home
        os.environ["TORCH_CUDA_ARCH_LIST"] = os.environ.get("OPFORGE_CUDA_ARCHS") or DEFAULT_ARCHS
    return home


CUDA_HOME = cuda_home()
os.environ.setdefault("MAX_JOBS", "2")

try:
    import torch
    from torch.utils import cpp_extension
except ImportError:
    sys.exit("opforge-torch: torch is not installed. The library is compiled against the "
             "environment's torch: install torch, then `pip install --no-build-isolation`.")


def torch_release():
    return tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])


def check_torch(with_cuda):
    if torch_release() < TORCH_MIN:
        sys.exit(
            f"opforge-torch: torch {torch.__version__} is older than "
            f"{TORCH_MIN[0]}.{TORCH_MIN[1]}; the stable ABI this package builds on needs "
            f"torch >= {TORCH_MIN[0]}.{TORCH_MIN[1]}. Install a newer torch first."
        )
    if with_cuda and torch.version.cuda is None:
        sys.exit(
            f"opforge-torch: OPFORGE_CUDA_HOME is set but torch {torch.__version__} is a CPU "
            "build; install a CUDA torch or unset OPFORGE_CUDA_HOME for a CPU-only build."
        )


def kernels_include():
    """The shared kernel headers: explicit, else this checkout's, else the installed opforge_spec's."""
    explicit = os.environ.get("OPFORGE_KERNELS_INCLUDE_DIR")
    if explicit:
        return Path(explicit)
    in_tree = HERE.parent.parent / "kernels" / "include"
    if in_tree.is_dir():
        return in_tree
    try:
        import opforge_spec
    except ImportError:
        sys.exit("opforge-torch: kernel headers not found: build from the opforge checkout, "
                 "`pip install ./kernels` (opforge_spec) or set OPFORGE_KERNELS_INCLUDE_DIR")
    return Path(opforge_spec.include_dir())


def toolkit_include_dirs():
    """torch's pip CUDA headers (cuBLAS & co.) that a bare system toolkit may lack."""
    site = Path(torch.__file__).resolve().parent.parent / "nvidia"
    return [str(p) for p in (site / "cu13" / "include", site / "cu12" / "include") if p.is_dir()]


def variant(cuda):
    base = f"stable{TORCH_MIN[0]}.{TORCH_MIN[1]}"
    return f"{base}-cu{cuda.replace('.', '')}" if cuda else f"{base}-cpu"


def build_info(with_cuda):
    cuda = torch.version.cuda if with_cuda else None
    archs = os.environ["TORCH_CUDA_ARCH_LIST"].replace(" ", ";").split(";") if with_cuda else []
    return {
        "abi": "stable",
        "torch_built_against": torch.__version__,
        "torch_min": f"{TORCH_MIN[0]}.{TORCH_MIN[1]}",
        "cuda": cuda,
        "archs": [a for a in archs if a],
        "cxx11_abi": bool(torch._C._GLIBCXX_USE_CXX11_ABI),
        "variant": variant(cuda),
    }


def extension(with_cuda):
    include = kernels_include()
    if not (include / "opforge" / "kernels" / "cpu.h").is_file():
        sys.exit(f"opforge-torch: shared kernels not found at {include} (set OPFORGE_KERNELS_INCLUDE_DIR)")
    target = f"-DTORCH_TARGET_VERSION=0x{TORCH_MIN[0]:02x}{TORCH_MIN[1]:02x}000000000000"
    cxx = ["-O3", "-g0", "-fvisibility=hidden", "-fvisibility-inlines-hidden", target, "-DTORCH_STABLE_ONLY"]
    # torch adds -D__CUDA_NO_HALF_CONVERSIONS__ & co. (against clashes with c10::Half, unused here);
    # the shared kernels may convert __half/__nv_bfloat16 implicitly, so undo them.
    no_half = ["HALF_OPERATORS", "HALF_CONVERSIONS", "BFLOAT16_CONVERSIONS", "HALF2_OPERATORS"]
    nvcc = ["-O3", "-Xcompiler=-fvisibility=hidden", target, "-DTORCH_STABLE_ONLY", "-DUSE_CUDA"]
    nvcc += [f"-U__CUDA_NO_{name}__" for name in no_half]
    link = [f"-Wl,-soname,{LIB_NAME}", f"-Wl,--version-script={HERE / 'csrc' / 'exports.map'}",
            "-Wl,--no-undefined", "-Wl,--as-needed"]
    sources = ["csrc/schema.cpp", "csrc/checks.cpp", "csrc/cpu_ops.cpp"]
    kind = cpp_extension.CppExtension
    kwargs = {}
    if with_cuda:
        sources.append("csrc/cuda_ops.cu")
        kind = cpp_extension.CUDAExtension
        kwargs["include_dirs"] = [str(include)] + toolkit_include_dirs()
    else:
        kwargs["include_dirs"] = [str(include)]
    return kind(
        name="opforge_torch.libopforge_torch",
        sources=sources,
        extra_compile_args={"cxx": cxx, "nvcc": nvcc},
        extra_link_args=link,
        py_limited_api=True,  # no libtorch_python: the library loads without Python's torch bindings
        **kwargs,
    )


class BuildLibrary(cpp_extension.BuildExtension):
    """Names the output libopforge_torch.so.1 and writes _build_info.json beside it."""

    def get_ext_filename(self, ext_name):
        # Called with the full dotted name and (by get_ext_fullpath) with its last part alone.
        parts = ext_name.split(".")
        if parts[-1] == "libopforge_torch":
            return os.path.join(*parts[:-1], LIB_NAME)
        return super().get_ext_filename(ext_name)

    def run(self):
        super().run()
        info = build_info(WITH_CUDA)
        in_source = self.inplace or getattr(self, "editable_mode", False)
        for root in [self.build_lib] + ([str(HERE / "src")] if in_source else []):
            out = Path(root) / "opforge_torch" / "_build_info.json"
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(info, indent=2) + "\n")
        what = f"CUDA {info['cuda']} for archs {';'.join(info['archs'])}" if WITH_CUDA else "CPU only (no CUDA)"
        log(f"built {LIB_NAME}: {what}; variant {info['variant']}, torch {torch.__version__}")


WITH_CUDA = bool(CUDA_HOME)
check_torch(WITH_CUDA)
log(
    f"CUDA build: {'yes, ' + CUDA_HOME + ', archs ' + os.environ['TORCH_CUDA_ARCH_LIST'] if WITH_CUDA else 'no (OPFORGE_CUDA_HOME unset)'}"
)

setup(
    ext_modules=[extension(WITH_CUDA)],
    cmdclass={"build_ext": BuildLibrary.with_options(no_python_abi_suffix=True)},
)
