"""The shared CPU kernel (kernels/include/opforge/kernels/cpu.h) compiled on its own through a tiny
C shim, optionally from a *mutated copy* of the headers: proves that the alignment checks catch a
wrong kernel, and that opforge_torch runs exactly that kernel."""
from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np

from opforge_align.harness.checks import spec

SHIM = r"""
#include "opforge/kernels/cpu.h"
extern "C" void swish_f32(const float* x, float* y, int64_t n, float beta) {
  namespace cpu = opforge::kernels::cpu;
  cpu::elementwise_forward(x, y, n, cpu::CpuMath<opforge::kernels::SwishMath>{beta});
}
"""
# Swish's value in its math header (SwishMath), the expression the mutations rewrite; if the kernel
# is refactored, update it here.
SWISH_HEADER = "ops/swish.h"
SWISH_EXPR = "return x * S{}(beta * x);"
MUTATIONS = {
    "none": SWISH_EXPR,
    "ulp": "return std::nextafter(x * S{}(beta * x), C(INFINITY));",  # 1 ulp too large
    "sign": "return -(x * S{}(beta * x));",
}


def build(tmp: Path, mutation: str = "none") -> ctypes.CDLL:
    """Copies the kernel headers into tmp, applies `mutation`, compiles the shim (-O3, as the
    packages build) and loads it."""
    include = tmp / "include"
    shutil.copytree(spec.include_dir(), include)
    swish_h = include / "opforge" / "kernels" / SWISH_HEADER
    text = swish_h.read_text()
    if SWISH_EXPR not in text:
        raise RuntimeError(f"kernel_shim: {SWISH_EXPR!r} not found in {SWISH_HEADER}: update MUTATIONS")
    swish_h.write_text("#include <cmath>\n" + text.replace(SWISH_EXPR, MUTATIONS[mutation]))
    (tmp / "shim.cc").write_text(SHIM)
    lib = tmp / f"libshim_{mutation}.so"
    subprocess.run(["g++", "-O3", "-std=c++17", "-shared", "-fPIC", f"-I{include}",
                    str(tmp / "shim.cc"), "-o", str(lib)], check=True)
    return ctypes.CDLL(str(lib))


def swish(lib: ctypes.CDLL, x: np.ndarray, beta: float) -> np.ndarray:
    x = np.array(x, dtype=np.float32, order="C")
    y = np.empty_like(x)
    lib.swish_f32(x.ctypes.data_as(ctypes.c_void_p), y.ctypes.data_as(ctypes.c_void_p),
                  ctypes.c_int64(x.size), ctypes.c_float(beta))
    return y
