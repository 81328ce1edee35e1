"""The wheel checks: the exclude list matches every runtime we must not bundle, and the library
check catches a wrong SONAME, a leaked C++ symbol and a missing entry point (real .so files)."""
from __future__ import annotations

import fnmatch
import shutil
import subprocess

import pytest

from ci.artifacts import wheels

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


@pytest.mark.parametrize("name, glibc", [
    ("opforge_ort-0.1.0-py3-none-manylinux_2_24_x86_64.whl", (2, 24)),
    ("opforge_torch-0.1.0-py3-none-manylinux_2_34_x86_64.whl", (2, 34)),
    ("x-1-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", (2, 17)),
    ("x-1-py3-none-manylinux2014_x86_64.whl", (2, 17)),
    ("x-1-py3-none-manylinux_2_28_aarch64.whl", (2, 28)),
    ("x-1-py3-none-linux_x86_64.whl", None),
])
def test_the_glibc_a_tag_claims(name, glibc):
    assert wheels.manylinux_glibc(name) == glibc


# manylinux_2_28's versions on x86_64 (auditwheel's policy, abridged)
POLICY_2_28 = [{"name": "manylinux_2_28", "symbol_versions": {"x86_64": {
    "GLIBC": ["2.2.5", "2.2.6", "2.3", "2.3.2", "2.3.3", "2.3.4", *(f"2.{m}" for m in range(4, 29))],
    "GLIBCXX": ["3.4", *(f"3.4.{m}" for m in range(1, 25))],
    "CXXABI": ["1.3", *(f"1.3.{m}" for m in range(1, 12))]}}}]
USES_NEW_GLIBC = """
#include <dlfcn.h>
#include <cmath>
#include <memory>
struct Big { char bytes[1 << 20]; };
extern "C" __attribute__((visibility("default"))) double entry(double x, unsigned long n) {
  auto shared = std::make_shared<double>(x);  // libstdc++ reads __libc_single_threaded (glibc >= 2.32)
  auto copy = shared;
  std::allocator<Big> big;                    // GCC >= 11: __throw_bad_array_new_length (GLIBCXX_3.4.29)
  big.deallocate(big.allocate(n), n);
  if (dlsym(RTLD_DEFAULT, "entry") == nullptr) return 0;  // dlsym@GLIBC_2.34 on glibc >= 2.34 (torch >= 2.14)
  return std::exp(*copy);                     // exp@GLIBC_2.29 on glibc >= 2.29
}
"""
FLOOR = wheels.Path(__file__).resolve().parents[2] / "kernels/include/opforge/kernels/platform_floor.h"


def host_glibc() -> tuple[int, int]:
    import platform
    version = platform.libc_ver()[1] or "0.0"
    return tuple(int(p) for p in version.split(".")[:2])


def build_entry(tmp_path, *flags: str):
    (tmp_path / "lib.cc").write_text(USES_NEW_GLIBC)
    out = tmp_path / "unpacked" / "libentry.so.1"
    out.parent.mkdir(exist_ok=True)
    subprocess.run(["g++", "-O2", "-shared", "-fPIC", *flags, "-o", str(out), str(tmp_path / "lib.cc"),
                    "-Wl,--push-state,--no-as-needed,-l:libdl.so.2,--pop-state"], check=True)
    return out


def tools_with_policy(tmp_path):
    policy = tmp_path / "tools/lib/python3.11/site-packages/auditwheel/policy/manylinux-policy.json"
    policy.parent.mkdir(parents=True)
    policy.write_text(wheels.json.dumps(POLICY_2_28))
    return tmp_path / "tools"


@needs_gcc
@pytest.mark.skipif(host_glibc() < (2, 32), reason="this glibc binds nothing newer than 2.28 anyway")
def test_a_tag_newer_than_2_28_names_the_symbols_that_pinned_it(tmp_path):
    build_entry(tmp_path)
    wheel = tmp_path / "opforge_x-0.1.0-py3-none-manylinux_2_34_x86_64.whl"
    problem = wheels.platform_problem(wheel, tmp_path / "unpacked", tools_with_policy(tmp_path),
                                      tmp_path / "log")
    assert problem.startswith(f"{wheel.name}: tag manylinux_2_34_x86_64 needs glibc 2.34, "
                              "expected manylinux_2_28 or older")
    assert "libentry.so.1: " in problem
    newer = ["__libc_single_threaded@GLIBC_2.32", *(["dlsym@GLIBC_2.34"] if host_glibc() >= (2, 34) else []),
             "exp@GLIBC_2.29"]
    assert ", ".join(newer) in problem  # after any GLIBCXX_3.4.29 one


@needs_gcc
def test_platform_floor_h_keeps_a_gcc_build_at_manylinux_2_28(tmp_path):
    """kernels' platform_floor.h, force-included as the packages do: no reference above 2.28."""
    lib = build_entry(tmp_path, "-include", str(FLOOR))
    allowed = {k: set(v) for k, v in POLICY_2_28[0]["symbol_versions"]["x86_64"].items()}
    assert wheels.too_new_symbols(lib, allowed, tmp_path / "log") == []
    assert subprocess.run(["python3", "-c", f"import ctypes; assert ctypes.CDLL('{lib}').entry"],
                          check=False).returncode == 0


def test_an_old_enough_tag_passes(tmp_path):
    wheel = tmp_path / "opforge_x-0.1.0-py3-none-manylinux_2_24_x86_64.whl"
    assert wheels.platform_problem(wheel, tmp_path, tmp_path, tmp_path / "log") is None


def wheel_needing_cudart(tmp_path, major: int, requires: list[str]):
    """A wheel whose library NEEDs libcudart.so.<major> (a stub of that SONAME), declaring `requires`."""
    import zipfile

    stub = build_lib(tmp_path, "libcudart.so", f"libcudart.so.{major}", "int cudart_stub() { return 0; }\n")
    src = tmp_path / "plugin.cc"
    src.write_text("int cudart_stub();\nint call() { return cudart_stub(); }\n")
    lib = tmp_path / "libopforge_ort.so.1"
    subprocess.run(["g++", "-shared", "-fPIC", "-Wl,--no-as-needed", "-o", str(lib), str(src),
                    str(stub)], check=True)
    meta = "Metadata-Version: 2.1\nName: opforge-ort\nVersion: 0.1.0\n"
    meta += "".join(f"Requires-Dist: {req}\n" for req in requires)
    wheel = tmp_path / "opforge_ort-0.1.0-py3-none-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.write(lib, "opforge_ort/libopforge_ort.so.1")
        archive.writestr("opforge_ort-0.1.0.dist-info/METADATA", meta)
    return wheel, lib


@needs_gcc
@pytest.mark.parametrize("major, requires, expected", [
    (13, [], "does not declare nvidia-cuda-runtime (Requires-Dist)"),
    (12, ["nvidia-cuda-runtime>=13"], "does not declare nvidia-cuda-runtime-cu12"),
    (13, ["nvidia-cuda-runtime>=13,<14"], None),
    (12, ["nvidia_cuda_runtime_cu12<13,>=12"], None),
    (13, ["torch>=2.10"], None),                      # torch brings its own CUDA runtime
    (13, ['nvidia-cuda-runtime; extra == "gpu"'], "does not declare"),  # an extra is not installed
])
def test_a_library_needing_cudart_must_declare_a_runtime(tmp_path, major, requires, expected):
    wheel, lib = wheel_needing_cudart(tmp_path, major, requires)
    dynamic = subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True).stdout
    problems = wheels.undeclared_cudart(lib.name, dynamic, wheels.declared_runtimes(wheel))
    if expected is None:
        assert problems == []
    else:
        assert len(problems) == 1 and expected in problems[0], problems
        assert f"libcudart.so.{major}" in problems[0] and "cuda-dependencies" in problems[0]
