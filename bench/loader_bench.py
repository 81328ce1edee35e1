"""opforge-loader benchmarks: op lookup+acquire (C++ and Python), one checked call, and hot-reload
latency while callers keep calling. Prints a table; writes JSON to $OPFORGE_STAGE_RESULT if set.

    python bench/loader_bench.py            # needs `pip install ./packages/loader`
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import opforge_loader

HERE = Path(__file__).resolve().parent
SCALE = "libops_example_scale.so.1"


def two_copies(root: Path) -> list[Path]:
    """The shipped Scale plugin under two paths: a reload target that is a different file."""
    libs = []
    for sub in ("a", "b"):
        d = root / sub
        d.mkdir(mode=0o755)
        for name in (SCALE, SCALE + ".manifest.json"):
            shutil.copy(Path(opforge_loader.plugin_dir()) / name, d / name)
        libs.append(d / SCALE)
    return libs


def cpp_numbers(root: Path, libs: list[Path]) -> dict:
    exe = root / "loader_bench"
    lib = Path(opforge_loader.library_path())
    subprocess.run(["g++", "-std=c++17", "-O2", f"-I{opforge_loader.include_dir()}", str(HERE / "loader_bench.cpp"),
                    str(lib), f"-Wl,-rpath,{lib.parent}", "-lpthread", "-o", str(exe)], check=True)
    out = subprocess.run([str(exe), *map(str, libs)], capture_output=True, text=True, check=True).stdout
    return {f"cpp_{k}": v for k, v in json.loads(out).items()}


def timed(fn, n: int) -> float:
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter_ns()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter_ns() - t0) / n)
    return best


def python_numbers(libs: list[Path]) -> dict:
    reg = opforge_loader.Registry(log=lambda level, line: None)
    reg.load(libs[0])
    x = np.ones(16, np.float32)

    def acquire_release():
        with reg.acquire("Scale"):
            pass

    def run():
        reg.run("Scale", [x], {"scale": 2.0})

    numbers = {"py_acquire_release_ns": timed(acquire_release, 20000), "py_run_16elems_ns": timed(run, 5000)}
    with reg.acquire("Scale") as op:
        numbers["py_op_run_16elems_ns"] = timed(lambda: op.run(x, scale=2.0), 5000)
    reload_ns = []
    for i in range(50):
        t0 = time.perf_counter_ns()
        reg.reload(libs[(i + 1) % 2])
        reload_ns.append(time.perf_counter_ns() - t0)
    numbers["py_reload_us_p50_idle"] = float(np.percentile(reload_ns, 50)) / 1000
    reg.close()
    return numbers


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.chmod(root, 0o755)
        libs = two_copies(root)
        numbers = {**cpp_numbers(root, libs), **python_numbers(libs)}
    width = max(map(len, numbers))
    print(f"{'metric':<{width}}  value")
    for k, v in numbers.items():
        print(f"{k:<{width}}  {v:,.1f}")
    target = os.environ.get("OPFORGE_STAGE_RESULT")
    if target:
        Path(target).write_text(json.dumps({"numbers": numbers, "artifacts": []}, indent=2))
    return 0 if numbers["cpp_failed_calls_during_reloads"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
