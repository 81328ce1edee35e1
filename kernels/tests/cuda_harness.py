"""The shared CUDA launchers (cuda.cuh) on numpy arrays, through a shim library with the C ABI
of gpu/gpu_shim.cu: that shim on a GPU, or cuda_emulation.cc's on the CPU."""
from __future__ import annotations

import ctypes

import numpy as np

import opforge_spec as spec

OPS = {name: i for i, name in enumerate(spec.OPS)}  # the shims number the ops as kOps does (spec order)
DTYPES = {"float32": (0, np.float32), "float16": (1, np.float16), "bfloat16": (2, np.uint16)}
# A 16-bit X with a float32 W (a mixed-dtype call): the shims' codes beside DTYPES'.
MIXED_DTYPES = {"float16": 3, "bfloat16": 4}
I64 = ctypes.c_int64
BYTES_TOUCHED, NO_MEMORY = -100, -101


def to_storage(dtype: str, values) -> np.ndarray:
    a = np.ascontiguousarray(np.asarray(values, np.float64)).astype(np.float32)
    if dtype != "bfloat16":
        return a.astype(DTYPES[dtype][1])
    bits = a.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(a), np.uint16(0x7FC0), rounded)


def from_storage(dtype: str, a: np.ndarray) -> np.ndarray:
    if dtype == "bfloat16":
        return (a.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return a.astype(np.float64)


def ptr(a):
    return None if a is None else a.ctypes.data_as(ctypes.c_void_p)


class Kernels:
    """The shared CUDA launchers on numpy arrays (float64 in and out)."""

    def __init__(self, lib):
        self.lib = lib
        lib.opforge_gpu_run.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, I64, I64, I64, I64,
                                        ctypes.c_float, ctypes.c_void_p, ctypes.c_void_p,
                                        ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                        ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        if hasattr(lib, "opforge_quant_run"):  # the emulation's only
            lib.opforge_quant_run.argtypes = [ctypes.c_int, ctypes.c_int, I64, I64, *[ctypes.c_void_p] * 7]
        if hasattr(lib, "opforge_gpu_stream_order"):  # the GPU shim's only
            lib.opforge_gpu_stream_order.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, I64,
                                                     I64, ctypes.c_int]
            lib.opforge_gpu_large.argtypes = [ctypes.c_int, ctypes.c_int, I64, I64, ctypes.c_void_p,
                                              ctypes.c_int, ctypes.c_void_p]

    def run(self, op: str, dtype: str, x, w=None, dy=None, attr=None, backward=False,
            in_offset=0, out_offset=0, raw=False, r=None, dh=None, w_float32=False):
        """Y (backward: dX, and dW for a weighted op) of X viewed as [rows, last dim]; an op with a
        residual R (dH backward) gives (Y, H) (backward: (dX, dW, dR)). w_float32: W stays float32
        beside a 16-bit X (MIXED_DTYPES)."""
        x = np.asarray(x, np.float64)
        cols = x.shape[-1] if x.ndim else 1
        rows = x.size // cols if cols else 0
        stored = [to_storage(dtype, a) if a is not None else None for a in (x, w, dy, r, dh)]
        if w_float32 and w is not None:
            stored[1] = to_storage("float32", w)
        code = MIXED_DTYPES[dtype] if w_float32 else DTYPES[dtype][0]
        y_shape = x.shape if backward else spec.output_shape(spec.OPS[op], x.shape)
        y = np.empty(y_shape, stored[0].dtype)
        h = np.empty(x.shape, stored[0].dtype) if r is not None else None
        dw = np.empty(cols, np.float32) if "W" in spec.OPS[op].inputs and backward else None
        defaults = [a.default for a in spec.OPS[op].attributes.values()]
        attr = (defaults[0] if defaults else 0.0) if attr is None else attr
        x_, w_, dy_, r_, dh_ = map(ptr, stored)
        status = self.lib.opforge_gpu_run(OPS[op], int(backward), code, in_offset,
                                          out_offset, rows, cols, attr, x_, w_, dy_, ptr(y),
                                          ptr(dw), r_, dh_, ptr(h))
        assert status != BYTES_TOUCHED, f"{op}: a byte outside its output (or of an input) changed"
        assert status == 0, f"{op}: CUDA error {status}"
        if raw:
            return (y, dw) if h is None else (y, dw, h)
        out = from_storage(dtype, y)
        if h is not None:
            return (out, dw.astype(np.float64), from_storage(dtype, h)) if backward else (out, from_storage(dtype, h))
        return (out, dw.astype(np.float64)) if dw is not None else out

    def run_quant(self, op: str, dtype: str, inputs: tuple, attrs: dict, w_float32=False) -> tuple:
        """(Q, Scale[, H]) as float64 (float8 decoded) of an op of a quantized rows' family, its
        inputs in the spec's order, contiguous. w_float32: W stays float32 beside a 16-bit X."""
        from opforge_spec.ops.rms_norm_quant import fp8_e4m3fn_decode

        desc = spec.OPS[op]
        named = dict(zip(desc.inputs, inputs))
        x = to_storage(dtype, named["X"]).reshape(np.shape(named["X"]))
        cols, rows = x.shape[-1], int(np.prod(x.shape[:-1]))
        w = to_storage("float32" if w_float32 else dtype, named["W"])
        r = to_storage(dtype, named["R"]) if "R" in named else None
        values = {**desc.defaults(), **attrs}
        quant = desc.output_dtype("Q", dtype, values)
        q = np.zeros(x.shape, np.int8 if quant == "int8" else np.uint8)
        scale = np.zeros(desc.output_shape_of("Scale", x.shape), np.float32)
        h = np.zeros_like(x) if "H" in desc.outputs else None
        attr_array = np.array([values[a] for a in desc.attributes], np.float32)
        code = MIXED_DTYPES[dtype] if w_float32 else DTYPES[dtype][0]
        status = self.lib.opforge_quant_run(OPS[op], code, rows, cols, ptr(attr_array), ptr(x), ptr(w), ptr(r),
                                            ptr(q), ptr(scale), ptr(h))
        assert status != BYTES_TOUCHED, f"{op}: a byte outside its output (or of an input) changed"
        assert status == 0, f"{op}: CUDA error {status}"
        out = (fp8_e4m3fn_decode(q) if quant == "float8_e4m3fn" else q.astype(np.float64), scale.astype(np.float64))
        return out if h is None else (*out, from_storage(dtype, h))

    def stream_order(self, op: str, dtype: str, rows: int, cols: int, backward=False, control=False):
        return self.lib.opforge_gpu_stream_order(OPS[op], int(backward), DTYPES[dtype][0], rows, cols,
                                                 int(control))

    def large(self, op: str, rows: int, cols: int, samples, backward=False):
        """float16 rows `samples` of the output, X filled on the device (gpu_shim.cu's pattern);
        None when this GPU lacks the memory."""
        row_length = cols // 2 if spec.OPS[op].split > 1 and not backward else cols
        out = np.empty((len(samples), row_length), np.float16)
        wanted = np.asarray(samples, np.int64)
        status = self.lib.opforge_gpu_large(OPS[op], int(backward), rows, cols, ptr(wanted),
                                            len(samples), ptr(out))
        if status == NO_MEMORY:
            return None
        assert status == 0, f"{op}: CUDA error {status}"
        return out.astype(np.float64)
