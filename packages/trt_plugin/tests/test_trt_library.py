"""The shipped file: SONAME, exported symbols, dependencies, manifest, SASS per arch."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import cuda_home, trt_headers

import opforge_spec
import opforge_trt

LIB = opforge_trt.library_path()
ENTRY_POINTS = ["getCreators", "getPluginCreators", "setLoggerFinder"]


def _tool(name):
    if shutil.which(name) is None:
        pytest.skip(f"{name} not installed (binutils)")
    return name


def _dynamic():
    return subprocess.run([_tool("readelf"), "-d", LIB], capture_output=True, text=True, check=True).stdout


def test_library_path_is_absolute_and_named_by_soname():
    assert os.path.isabs(LIB) and Path(LIB).is_file()
    assert Path(LIB).name == "libopforge_trt.so.1"
    assert "Library soname: [libopforge_trt.so.1]" in _dynamic()


def test_only_the_entry_points_are_exported():
    out = subprocess.run([_tool("nm"), "-D", "--defined-only", LIB], capture_output=True, text=True, check=True).stdout
    assert sorted(line.split()[-1] for line in out.splitlines()) == ENTRY_POINTS


def test_dependencies_cudart_shared_no_tensorrt():
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", _dynamic())
    # cudart shared, from the CUDA runtime wheel (a static one binds the build host's glibc
    # versions); TensorRT loads us, never the reverse
    assert not [n for n in needed if "nvinfer" in n], needed
    assert [n for n in needed if n.startswith("libcudart.so.")], needed
    out = subprocess.run([_tool("nm"), "-D", "--undefined-only", LIB], capture_output=True, text=True).stdout
    assert "nvinfer" not in out and "getPluginRegistry" not in out  # TensorRT calls us, never the reverse


def test_runpath_is_only_the_cuda_runtime_wheel():
    runpath = re.findall(r"\((?:RUNPATH|RPATH)\)\s+Library r(?:un)?path: \[([^\]]+)\]", _dynamic())
    major = re.search(r"libcudart\.so\.(\d+)", _dynamic())[1]
    wheel_dir = f"nvidia/cu{major}/lib" if int(major) >= 13 else "nvidia/cuda_runtime/lib"
    assert runpath == [f"$ORIGIN/../{wheel_dir}"]  # no build path


def test_manifest_matches_the_installed_file():
    manifest = json.loads(Path(opforge_trt.manifest_path()).read_text())
    assert Path(opforge_trt.manifest_path()) == Path(LIB + ".manifest.json")
    assert manifest["sha256"] == hashlib.sha256(Path(LIB).read_bytes()).hexdigest()
    assert manifest["library"] == "libopforge_trt.so.1" and manifest["name"] == "opforge_trt"
    assert manifest["kind"] == "tensorrt" and manifest["manifest_version"] == 1
    assert manifest["api_version"] == 10 and manifest["sdk"] == {"min": "10.0", "max": None}
    assert manifest["version"] == opforge_trt.__version__
    assert manifest["ops"] == [{"domain": opforge_spec.DOMAIN, "name": name, "version": opforge_spec.DOMAIN_VERSION}
                               for name in opforge_spec.OPS]


def test_build_info_names_the_pinned_headers():
    info = opforge_trt.build_info()
    if info["tensorrt_headers_source"] == "OPFORGE_TRT_INCLUDE_DIR":
        pytest.skip("built with OPFORGE_TRT_INCLUDE_DIR, not the pinned headers")
    assert info["tensorrt_headers_source"] == "".join(trt_headers().PIN)
    assert info["tensorrt_headers"].split(".")[0] == "10" and info["plugin_api"] == "IPluginV3"


def _cuobjdump():
    """cuobjdump from: OPFORGE_CUOBJDUMP, the toolkit, PATH, or the pip package nvidia-cuda-cuobjdump."""
    home = cuda_home()
    site = Path(sys.prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    candidates = [os.environ.get("OPFORGE_CUOBJDUMP"), home and home / "bin" / "cuobjdump", shutil.which("cuobjdump"),
                  site / "nvidia" / "cu13" / "bin" / "cuobjdump", site / "nvidia" / "cuda_cuobjdump" / "bin" / "cuobjdump"]
    for c in candidates:
        if c and Path(c).is_file():
            return str(c)
    pytest.skip("no cuobjdump (set OPFORGE_CUOBJDUMP or pip install --no-deps nvidia-cuda-cuobjdump)")


def test_sass_for_every_arch_built():
    archs = opforge_trt.build_info()["cuda_architectures"]  # CMake style: "80-real", "90", "90-virtual"
    wanted = sorted(re.match(r"\d+[af]?", a).group(0) for a in archs if not a.endswith("-virtual"))
    out = subprocess.run([_cuobjdump(), "--list-elf", LIB], capture_output=True, text=True, check=True).stdout
    assert sorted(set(re.findall(r"\.sm_(\d+[af]?)\.cubin", out))) == wanted, out


def test_ptx_for_the_highest_arch():
    """GPUs newer than the list (sm_100, sm_120) JIT it; "80-real" is SASS only, "90" SASS + PTX
    (which archs get PTX: kernels/cmake/opforge_cuda_archs.cmake)."""
    archs = opforge_trt.build_info()["cuda_architectures"]
    wanted = sorted(re.match(r"\d+[af]?", a).group(0) for a in archs if not a.endswith("-real"))
    assert wanted, f"no PTX in {archs}: the highest arch (or a '+PTX' one) must have it"
    out = subprocess.run([_cuobjdump(), "--list-ptx", LIB], capture_output=True, text=True).stdout
    assert sorted(set(re.findall(r"\.sm_(\d+[af]?)\.ptx", out))) == wanted, out


def test_load_into_hands_the_library_to_the_registry():
    class Registry:
        def load_library(self, path):
            self.path = path
            return "handle"

    registry = Registry()
    assert opforge_trt.load_into(registry) == "handle" and registry.path == LIB
