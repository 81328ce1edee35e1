"""≥ 8 threads calling an op while another thread reloads/unloads it ≥ 200 times, with the host
compiled from source under ThreadSanitizer and AddressSanitizer (+ LeakSanitizer); plain plugins
and plugins whose offset comes from a dependency found through RUNPATH $ORIGIN."""
import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from plugin_build import (
    build_c_plugin,
    build_dependency,
    build_origin_plugin,
    nlohmann_json_include_dir,
)

PKG = Path(__file__).resolve().parents[1]
HOST_SOURCES = sorted(str(p) for p in (PKG / "csrc" / "host").glob("*.cpp"))
CYCLES, THREADS = 240, 8
TSAN_SUPPRESSIONS = PKG / "tests" / "stress" / "tsan.supp"  # ld.so's own lock, invisible to TSan


def json_include() -> str:
    include = nlohmann_json_include_dir()
    if include is None:
        pytest.fail("the host sources need nlohmann/json.hpp: pip install nlohmann-json==3.12.0 "
                    "(the loader's `test` extra)")
    return include


def compile_stress(out: Path, sanitizer: str, json_include: str) -> Path:
    """The stress host under one sanitizer: each source compiled on its own, two at a time (the
    machine has 2 cores), then linked."""
    flags = ["-std=c++17", "-O1", "-g", f"-fsanitize={sanitizer}", "-fno-omit-frame-pointer"]
    includes = [f"-I{PKG / 'include'}", f"-I{PKG / 'csrc' / 'host'}", f"-I{json_include}",
                '-DOPFORGE_LOADER_VERSION="0.1.0"']

    def compile_one(source: str) -> str:
        obj = out / f"{Path(source).stem}.o"
        subprocess.run(["g++", *flags, *includes, "-c", source, "-o", str(obj)], check=True)
        return str(obj)

    with ThreadPoolExecutor(2) as pool:
        objects = list(pool.map(compile_one, [*HOST_SOURCES, str(PKG / "tests" / "stress" / "stress.cpp")]))
    exe = out / f"stress_{sanitizer}"
    subprocess.run(["g++", *flags, *objects, "-ldl", "-lpthread", "-o", str(exe)], check=True)
    return exe


@pytest.fixture(scope="module")
def stress_host(run_once):
    """stress_host(sanitizer) -> the host built under that sanitizer, built on first use and once
    per test run: pytest-xdist workers share it, and each builds only what its tests need."""
    include = json_include()
    return lambda sanitizer: run_once(f"stress_{sanitizer}",
                                      lambda out: compile_stress(out, sanitizer, include))


def build_versions(plugin_dir: Path, origin: bool) -> tuple[Path, Path]:
    """stress 1.0.1 (y = x + 1) and 1.0.2 (y = x + 2): stress.cpp expects the patch number."""
    if not origin:
        return (build_c_plugin(plugin_dir, "libops_stress.so.1", name="stress", version="1.0.1", offset=1.0),
                build_c_plugin(plugin_dir, "libops_stress_v2.so.1", name="stress", version="1.0.2", offset=2.0))
    deps = [build_dependency(plugin_dir, f"libstress_helper.so.{n}", float(n)) for n in (1, 2)]
    return (build_origin_plugin(plugin_dir, "libops_stress.so.1", deps[0], name="stress", version="1.0.1"),
            build_origin_plugin(plugin_dir, "libops_stress_v2.so.1", deps[1], name="stress", version="1.0.2"))


@pytest.mark.parametrize("origin", [False, True], ids=["plain", "origin_dependency"])
@pytest.mark.parametrize("sanitizer", ["thread", "address"])
def test_stress_reload_unload_under_sanitizer(stress_host, plugin_dir, sanitizer, origin):
    host = stress_host(sanitizer)
    v1, v2 = build_versions(plugin_dir, origin)
    env = dict(os.environ, TSAN_OPTIONS=f"halt_on_error=1 second_deadlock_stack=1 suppressions={TSAN_SUPPRESSIONS}",
               ASAN_OPTIONS="detect_leaks=1:halt_on_error=1", OPFORGE_LOADER_LOG="0")
    proc = subprocess.run([str(host), str(v1), str(v2), str(CYCLES), str(THREADS)],
                          capture_output=True, text=True, timeout=180, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    assert "WARNING: ThreadSanitizer" not in proc.stderr and "ERROR: AddressSanitizer" not in proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["failed_with_ref"] == 0
    assert result["writer_ops"] >= 200 and result["writer_errors"] == 0
    assert result["calls"] > CYCLES
    assert result["dlclose_lines"] == result["libraries_loaded"]  # every library unloaded, none early
