"""The wheel checks: the exclude list matches every runtime we must not bundle, and the library
check catches a wrong SONAME, a leaked C++ symbol and a missing entry point (real .so files)."""
from __future__ import annotations

import fnmatch
import shutil
import subprocess

import pytest

from ci import wheels

RUNTIMES = ["libtorch.so", "libtorch_cpu.so", "libtorch_cuda.so", "libc10.so", "libc10_cuda.so",
            "libcudart.so.12", "libcudart.so.13", "libonnxruntime.so.1", "libonnxruntime.so.1.17.3",
            "libnvinfer.so.10", "libnvinfer_plugin.so.10"]
OURS = ["libopforge_ort.so.1", "libopforge_torch.so.1", "libopforge_loader.so.1",
        "libops_opforge_nn.so.1", "libopforge_trt.so.1"]


def excluded(name: str) -> bool:
    return any(fnmatch.fnmatch(name, pattern) for pattern in wheels.EXCLUDES)


@pytest.mark.parametrize("name", RUNTIMES)
def test_every_runtime_is_excluded_for_every_major(name):
    assert excluded(name)


@pytest.mark.parametrize("name", OURS)
def test_our_libraries_are_not_excluded(name):
    assert not excluded(name)


def test_excludes_are_separate_patterns():
    """PITFALLS: `"a" "b"` silently concatenates into one pattern that matches nothing."""
    assert all(pattern.count(".so") == 1 for pattern in wheels.EXCLUDES)


needs_gcc = pytest.mark.skipif(not shutil.which("g++") or not shutil.which("readelf"),
                               reason="no g++/readelf on this machine")


def build_lib(tmp_path, name: str, soname: str, source: str, hidden: bool = True):
    src = tmp_path / "lib.cc"
    src.write_text(source)
    out = tmp_path / name
    flags = ["-fvisibility=hidden"] if hidden else []
    subprocess.run(["g++", "-shared", "-fPIC", *flags, f"-Wl,-soname,{soname}", "-o", str(out),
                    str(src)], check=True)
    return out


ENTRY = 'extern "C" __attribute__((visibility("default"))) int RegisterCustomOps() { return 0; }\n'
LEAK = "int helper(int x) { return x + 1; }\n"


@needs_gcc
def test_a_clean_library_passes(tmp_path):
    lib = build_lib(tmp_path, "libopforge_ort.so.1", "libopforge_ort.so.1", ENTRY + LEAK)
    assert wheels.check_library(lib, tmp_path / "log") == []


@needs_gcc
def test_leaks_wrong_soname_and_missing_entry_are_caught(tmp_path):
    lib = build_lib(tmp_path, "libopforge_ort.so.1", "libopforge_ort.so", LEAK, hidden=False)
    problems = wheels.check_library(lib, tmp_path / "log")
    assert any("SONAME libopforge_ort.so, expected" in p for p in problems)
    assert any("exports 1 C++ symbols (e.g. _Z6helperi)" in p for p in problems)
    assert any("entry point RegisterCustomOps not exported" in p for p in problems)
