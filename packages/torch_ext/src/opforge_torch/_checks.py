"""The argument checks of csrc/checks.cpp, for the fake (meta) kernels.

torch.compile and torch.export run the fake kernels instead of the real ones, and a call whose
tensors sit on two devices (a CPU input with a meta weight) is dispatched to them in eager mode
too: they must refuse what the C++ kernels refuse, in the same order and with the same text.
Attributes follow the shared rule of opforge_spec (the twin of kernels/.../attrs.h).
"""

from __future__ import annotations

import torch

import opforge_spec

_DTYPE_NAMES = {torch.float32: "float32", torch.float64: "float64", torch.float16: "float16",
                torch.bfloat16: "bfloat16", torch.int64: "int64", torch.int32: "int32",
                torch.int16: "int16", torch.int8: "int8", torch.uint8: "uint8", torch.bool: "bool",
                torch.float8_e4m3fn: "float8_e4m3fn"}
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


def _size(size):
    """A size as the eager message prints it: a symbolic one (torch.compile(dynamic=True), torch.export)
    by its hint, the size of the tensors being traced; the symbol only where there is none (a
    data-dependent size). Reading a hint adds no guard."""
    if isinstance(size, torch.SymInt) and size.node.has_hint():
        return size.node.hint
    return size


def _sizes(shape) -> tuple:
    return tuple(_size(d) for d in shape)


def _shape(t: torch.Tensor) -> str:
    return "[" + ", ".join(str(d) for d in _sizes(t.shape)) + "]"


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
        expected = "[" + ", ".join(str(d) for d in _sizes(shape)) + "]"
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


def attributes(spec: opforge_spec.OpSpec, values) -> None:
    """Every attribute of `spec` by the shared rule, `values` in the spec's order."""
    for name, value in zip(spec.attributes, values):
        attribute(spec.name, name, value)


def _x_shape(spec: opforge_spec.OpSpec, x: torch.Tensor) -> None:
    if x.dim() < 1 and spec.x_error(()) is not None:
        raise RuntimeError(spec.x_error(()))
    if spec.split > 1:
        last = x.shape[-1]
        # torch._check: with a dynamic last dim this records the constraint instead of specializing
        torch._check(last >= spec.split, lambda: spec.x_error(_sizes(x.shape)))
        torch._check(last % spec.split == 0, lambda: spec.x_error(_sizes(x.shape)))


def _weight(spec: opforge_spec.OpSpec, x: torch.Tensor, w: torch.Tensor) -> None:
    message = spec.w_dtype_error(_dtype_name(x.dtype), _dtype_name(w.dtype))  # X's, or float32 with a 16-bit X
    if message is not None:
        raise RuntimeError(message)
    cols = x.shape[-1]
    before, after = opforge_spec.WEIGHT_EXPECTED
    torch._check(w.dim() == 1 and w.shape[0] == cols, lambda: opforge_spec.error(
        spec.name, "W", f"{before}{_size(cols)}{after}", f"shape {_shape(w)}"))


def _residual(spec: opforge_spec.OpSpec, x: torch.Tensor, r: torch.Tensor) -> None:
    _same_dtype(spec.name, "R", r, "X", x)

    def message():
        return spec.r_error(_sizes(x.shape), _sizes(r.shape))

    if r.dim() != x.dim():
        raise RuntimeError(message())
    for size, x_size in zip(r.shape, x.shape):
        torch._check(size == x_size, message)


_INPUT_RULES = {"R": _residual, "W": _weight}  # the rule of each input but X, by its role


def op(spec: opforge_spec.OpSpec, tensors: tuple, attrs: tuple) -> None:
    """The C++ kernels' checks of a forward call (its tensor inputs in the spec's order), in
    their order (csrc/checks.cpp check_op)."""
    named = dict(zip(spec.inputs, tensors))
    x = named.pop("X")
    for name, t in named.items():
        _same_device(spec.name, name, t, "X", x)
    _dtype(spec.name, "X", x)
    _x_shape(spec, x)
    for name, t in named.items():
        _INPUT_RULES[name](spec, x, t)
    attributes(spec, attrs)


def backward(spec: opforge_spec.OpSpec, grads: tuple, tensors: tuple, attrs: tuple) -> None:
    """A backward op's checks: one gradient per output (dY, dH), then the forward's."""
    x = tensors[0]
    names = tuple(f"d{name}" for name in spec.outputs)
    for name, grad in zip(names, grads):
        _same_device(spec.name, name, grad, "X", x)
    op(spec, tensors, attrs)
    for i, (name, grad, shape) in enumerate(zip(names, grads, output_shapes(spec, x))):
        _same_dtype(spec.name, name, grad, "X", x)
        own_shape = i == 0 and spec.split > 1  # Y keeps X's shape unless X's last axis is split
        _shape_is(spec.name, name, grad, shape, spec.outputs[i] if own_shape else "X")


def output_shapes(spec: opforge_spec.OpSpec, x: torch.Tensor) -> tuple:
    """Each output's shape by its rule (OpSpec.shape_rule: the op's, X's, or X's with the last dim 1)."""
    return tuple(tuple(spec.output_shape_of(name, x.shape)) for name in spec.outputs)


def output_dtypes(spec: opforge_spec.OpSpec, x_dtype: torch.dtype, attrs: tuple) -> tuple:
    """Each output's dtype for X's dtype and the call's attributes (OpSpec.output_dtype)."""
    values = dict(zip(spec.attributes, attrs))
    return tuple(x_dtype if name not in spec.output_dtypes
                 else getattr(torch, spec.output_dtype(name, "", values)) for name in spec.outputs)


def out_names(spec: opforge_spec.OpSpec) -> tuple:
    """The .out overload's output arguments: `out`, or one per output (y_out, h_out)."""
    if len(spec.outputs) == 1:
        return ("out",)
    return tuple(f"{name.lower()}_out" for name in spec.outputs)


def outs(spec: opforge_spec.OpSpec, outs: tuple, x: torch.Tensor, attrs: tuple = ()) -> None:
    """The outputs of an .out overload: X's device, each output's dtype (X's unless the spec gives
    the output its own: `attrs` pick it) and shape."""
    attrs = (*attrs, *tuple(spec.defaults().values())[len(attrs):])
    dtypes = output_dtypes(spec, x.dtype, attrs)
    for name, out, shape, output, dtype in zip(out_names(spec), outs, output_shapes(spec, x), spec.outputs, dtypes):
        _same_device(spec.name, name, out, "X", x)
        if output in spec.output_dtypes:
            if out.dtype != dtype:
                fail(spec.name, name, f"dtype {_dtype_name(dtype)} (dtype of {output})", _dtype_name(out.dtype))
        else:
            _same_dtype(spec.name, name, out, "X", x)
        _shape_is(spec.name, name, out, shape, output)


def out_not_tracked(spec: opforge_spec.OpSpec, tensors: tuple, outs: tuple, tracked) -> None:
    """aten's out= rule: no derivative flows through a write into an output, so no input and no
    output that autograd records (`tracked`) is taken."""
    for name, t in zip((*spec.inputs, *out_names(spec)), (*tensors, *outs)):
        if tracked(t):
            fail(spec.name, "out", "no tensor that autograd records (out= does not support "
                 "automatic differentiation; call the op without out=)", f"{name} requiring grad")
