"""Build inputs of the trt_fields target: the TensorRT plugin's C++ sources (instrumented), with
the TensorRT headers found as the package build finds them (OPFORGE_TRT_INCLUDE_DIR, else the
wheel packages/trt_plugin/cmake/trt_headers.py pins and fetches) and a CUDA
toolkit's cuda_runtime_api.h and libcudart (the plugin reports launch errors through it).
The CUDA launchers are replaced by no_cuda_kernels.cc: field collections never reach enqueue."""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent
PLUGIN_SOURCES = ["entry.cc", "plugin.cc", "creator.cc", "log.cc"]


def _unavailable(reason: str) -> Exception:
    try:
        from fuzz import Unavailable
    except ImportError:  # an engine without the verdict type yet
        return RuntimeError(f"unavailable: {reason}")
    return Unavailable(reason)


def _trt_include_dir(repo: Path) -> Path:
    env = os.environ.get("OPFORGE_TRT_INCLUDE_DIR")
    if env:
        found = Path(env)
    else:
        script = repo / "packages" / "trt_plugin" / "cmake" / "trt_headers.py"
        spec = importlib.util.spec_from_file_location("opforge_trt_headers", script)
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
            found = module.fetch(*module.pinned(repo))
        except (ImportError, OSError, KeyError, SystemExit) as error:
            raise _unavailable(f"no TensorRT headers (set OPFORGE_TRT_INCLUDE_DIR): {error}") from None
    if not (found / "NvInferRuntime.h").is_file():
        raise _unavailable(f"no NvInferRuntime.h in {found}")
    return found


def _cuda_home() -> Path:
    """The toolkit the plugin's tests use: OPFORGE_CUDA_HOME, CUDA_HOME, nvcc on PATH, /usr/local/cuda."""
    nvcc = shutil.which("nvcc")
    candidates = [os.environ.get("OPFORGE_CUDA_HOME"), os.environ.get("CUDA_HOME"),
                  str(Path(nvcc).resolve().parents[1]) if nvcc else None, "/usr/local/cuda"]
    for root in filter(None, candidates):
        if (Path(root) / "include" / "cuda_runtime_api.h").is_file():
            return Path(root)
    raise _unavailable("no CUDA toolkit (cuda_runtime_api.h): set OPFORGE_CUDA_HOME")


def _libcudart(home: Path) -> Path:
    for folder in (home / "lib64", home / "lib"):
        # the unversioned link of a system toolkit, else the versioned file of a PyPI one
        for lib in [folder / "libcudart.so", *sorted(folder.glob("libcudart.so.[0-9]*"))]:
            if lib.is_file():
                return lib
    raise _unavailable(f"no libcudart.so in {home}/lib64 or {home}/lib")


def _format_version(package: Path) -> str:
    """The serialization format the package build defines (CMakeLists.txt is its one source)."""
    text = (package / "CMakeLists.txt").read_text()
    match = re.search(r"set\(OPFORGE_TRT_FORMAT_VERSION (\d+)\)", text)
    if match is None:
        raise RuntimeError(f"{package / 'CMakeLists.txt'}: no set(OPFORGE_TRT_FORMAT_VERSION <n>)")
    return match.group(1)


def compile_inputs(repo: Path) -> dict:
    repo = Path(repo)
    package = repo / "packages" / "trt_plugin"
    home = _cuda_home()
    cudart = _libcudart(home)
    return {
        "sources": [str(HERE / "target.cpp"), str(HERE / "no_cuda_kernels.cc"),
                    *(str(package / "csrc" / name) for name in PLUGIN_SOURCES)],
        "include_dirs": [str(package / "csrc"), str(repo / "kernels" / "include"), str(_trt_include_dir(repo)),
                         str(home / "include")],
        "defines": [f"OPFORGE_TRT_FORMAT_VERSION={_format_version(package)}"],
        "extra_objects": [str(cudart)],
        "link_args": [f"-Wl,-rpath,{cudart.parent}"],
    }
