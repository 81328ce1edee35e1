"""The argument checks of csrc/checks.cpp, for the fake (meta) kernels.

torch.compile and torch.export run the fake kernels instead of the real ones, and a call whose
tensors sit on two devices (a CPU input with a meta weight) is dispatched to them in eager mode
too: they must refuse what the C++ kernels refuse, in the same order and with the same text.
Attributes follow the shared rule of opforge_spec (the twin of kernels/.../attrs.h).
"""

from __future__ import annotations

import torch

import opforge_spec

SWISH = opforge_spec.SWISH.name
RMS_NORM = opforge_spec.RMS_NORM.name
SWIGLU = opforge_spec.SWIGLU.name

_DTYPE_NAMES = {torch.float32: "float32", torch.float64: "float64", torch.float16: "float16",
                torch.bfloat16: "bfloat16", torch.int64: "int64", torch.int32: "int32",
                torch.int16: "int16", torch.int8: "int8", torch.uint8: "uint8", torch.bool: "bool"}
# Per device type: the dtypes its kernels take and how the error names them. A meta tensor
# stands for a tensor of any device, so it takes what either backend takes.
_DTYPES = {
    "cpu": ({torch.float32, torch.float64, torch.bfloat16},
            "float32, float64 or bfloat16 tensor on CPU"),
    "cuda": ({torch.float32, torch.float16, torch.bfloat16},
             "float32, float16 or bfloat16 tensor on CUDA"),
    "meta": ({torch.float32, torch.float64, torch.float16, torch.bfloat16},
             "float32, float64, float16 or bfloat16 tensor"),
}


def fail(op: str, what: str, expected: str, got: str):
    raise RuntimeError(opforge_spec.error(op, what, expected, got))


def _dtype_name(dtype: torch.dtype) -> str:
    return _DTYPE_NAMES.get(dtype, str(dtype).removeprefix("torch."))


def _shape(t: torch.Tensor) -> str:
    return "[" + ", ".join(str(d) for d in t.shape) + "]"


def _same_device(op: str, name: str, t: torch.Tensor, ref_name: str, ref: torch.Tensor) -> None:
    if t.device != ref.device:
        fail(op, name, f"a tensor on {ref.device} (device of {ref_name})", str(t.device))


def _dtype(op: str, name: str, t: torch.Tensor) -> None:
    if t.device.type not in _DTYPES:  # no kernel of ours runs there
        fail(op, name, "a tensor on cpu or cuda", str(t.device))
    allowed, text = _DTYPES[t.device.type]
    if t.dtype not in allowed:
        fail(op, name, text, _dtype_name(t.dtype))


def _same_dtype(op: str, name: str, t: torch.Tensor, ref_name: str, ref: torch.Tensor) -> None:
    if t.dtype != ref.dtype:
        fail(op, name, f"dtype {_dtype_name(ref.dtype)} (dtype of {ref_name})", _dtype_name(t.dtype))


def _same_shape(op: str, name: str, t: torch.Tensor, ref_name: str, ref: torch.Tensor) -> None:
    _shape_is(op, name, t, tuple(ref.shape), ref_name)


def _shape_is(op: str, name: str, t: torch.Tensor, shape: tuple, ref_name: str) -> None:
    def message():
        expected = "[" + ", ".join(str(d) for d in shape) + "]"
        return opforge_spec.error(op, name, f"shape {expected} (shape of {ref_name})", _shape(t))

    if t.dim() != len(shape):
        raise RuntimeError(message())
    for size, ref_size in zip(t.shape, shape):
        # torch._check, not `if`: with dynamic shapes it records the equality instead of
        # specializing on it (and raises RuntimeError when it is known to be false).
        torch._check(size == ref_size, message)


def attribute(op: str, name: str, value: float) -> None:
    """The shared attribute rule: finite once rounded to float32 (epsilon also >= 0)."""
    spec = opforge_spec.OPS[op]
    message = spec.attributes[name].error(op, value)
    if message is not None:
        raise RuntimeError(message)


def swish(x: torch.Tensor, beta: float) -> None:
    _dtype(SWISH, "X", x)
    attribute(SWISH, "beta", beta)


def swish_backward(dy: torch.Tensor, x: torch.Tensor, beta: float) -> None:
    _same_device(SWISH, "dY", dy, "X", x)
    swish(x, beta)
    _same_dtype(SWISH, "dY", dy, "X", x)
    _same_shape(SWISH, "dY", dy, "X", x)


def rms_norm(x: torch.Tensor, w: torch.Tensor, epsilon: float) -> None:
    _same_device(RMS_NORM, "W", w, "X", x)
    _dtype(RMS_NORM, "X", x)
    if x.dim() < 1:
        fail(RMS_NORM, "X", "a tensor of rank >= 1", "rank 0")
    _same_dtype(RMS_NORM, "W", w, "X", x)
    cols = x.shape[-1]
    before, after = opforge_spec.RMS_NORM.extra["w_expected"]
    torch._check(w.dim() == 1 and w.shape[0] == cols, lambda: opforge_spec.error(
        RMS_NORM, "W", f"{before}{cols}{after}", f"shape {_shape(w)}"))
    attribute(RMS_NORM, "epsilon", epsilon)


def rms_norm_backward(dy: torch.Tensor, x: torch.Tensor, w: torch.Tensor, epsilon: float) -> None:
    _same_device(RMS_NORM, "dY", dy, "X", x)
    rms_norm(x, w, epsilon)
    _same_dtype(RMS_NORM, "dY", dy, "X", x)
    _same_shape(RMS_NORM, "dY", dy, "X", x)


def swiglu_output_shape(x: torch.Tensor) -> tuple:
    return (*x.shape[:-1], x.shape[-1] // 2)


def _swiglu_shape(x: torch.Tensor) -> None:
    if x.dim() < 1:
        raise RuntimeError(opforge_spec.swiglu_x_error(()))
    last = x.shape[-1]
    # torch._check: with a dynamic last dim this records the constraint instead of specializing
    torch._check(last >= 2, lambda: opforge_spec.swiglu_x_error(x.shape))
    torch._check(last % 2 == 0, lambda: opforge_spec.swiglu_x_error(x.shape))


def swiglu(x: torch.Tensor, beta: float) -> None:
    _dtype(SWIGLU, "X", x)
    _swiglu_shape(x)
    attribute(SWIGLU, "beta", beta)


def swiglu_backward(dy: torch.Tensor, x: torch.Tensor, beta: float) -> None:
    _same_device(SWIGLU, "dY", dy, "X", x)
    swiglu(x, beta)
    _same_dtype(SWIGLU, "dY", dy, "X", x)
    _shape_is(SWIGLU, "dY", dy, swiglu_output_shape(x), "Y")


def out(op: str, out: torch.Tensor, x: torch.Tensor, shape: tuple) -> None:
    """`out` of an .out overload: X's device and dtype, the output's shape."""
    _same_device(op, "out", out, "X", x)
    _same_dtype(op, "out", out, "X", x)
    _shape_is(op, "out", out, tuple(shape), "Y")
