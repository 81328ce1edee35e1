"""Fake (meta) kernels and autograd for the opforge ops (their Python entry points are generated:
_ops_generated.py).

Autograd to any order: the ops' backward is the fused ``<op>_backward`` kernel (one gradient per
output in, zeros for an output that got none, one gradient per tensor input out), and those
backward ops' autograd formula is autograd through the op's composed torch form
(opforge_spec.OpSpec.composed). First derivatives stay fused; second and higher derivatives
(gradient penalties, Hessian-vector products) go through the composed form.

Each formula is an autograd node registered at the Autograd key (not torch.library.register_autograd:
the Function that builds has no setup_context, and the torch.func transforms refuse it), so
torch.func.grad/vjp/jacrev work over every op. The ``.out`` overloads get aten's out= rule there.
"""

import struct

import torch
from torch._functorch.utils import enable_single_level_autograd_function

import opforge_spec

from . import _checks

_ops = torch.ops.opforge


def _with_defaults(spec: opforge_spec.OpSpec, args: tuple, tensor_count: int) -> tuple:
    """`args` with the attributes left out (the trailing ones) given their defaults."""
    defaults = tuple(spec.defaults().values())
    return (*args, *defaults[len(args) - tensor_count:])


def _inputs(spec: opforge_spec.OpSpec, args: tuple) -> tuple:
    """(tensors, attributes) of a call with the op's tensor inputs, then its attributes in the
    spec's order (defaults for those left out)."""
    count = len(spec.inputs)
    return args[:count], _with_defaults(spec, args, count)[count:]


# Fake kernels: the C++ kernels' checks, then shapes/dtypes only. The real kernels return
# contiguous outputs, so do these (opcheck compares strides).
def _empty_like(t):
    return torch.empty_like(t, memory_format=torch.contiguous_format)


def _one_or_tuple(values: tuple):
    """An op's result as its schema returns it: one Tensor, or a tuple of them."""
    return values if len(values) > 1 else values[0]


def _register_fakes(spec: opforge_spec.OpSpec) -> None:
    name = f"opforge::{spec.torch_name}"
    output_count = len(spec.outputs)

    def forward(*args):
        tensors, attrs = _inputs(spec, args)
        _checks.op(spec, tensors, attrs)
        x = tensors[0]
        return _one_or_tuple(tuple(x.new_empty(shape, dtype=dtype) for shape, dtype in
                                   zip(_checks.output_shapes(spec, x), _checks.output_dtypes(spec, x.dtype, attrs))))

    def forward_out(*args, **outs):  # out=, or one per output (y_out=, h_out=)
        tensors, attrs = _inputs(spec, args)
        _checks.op(spec, tensors, attrs)
        _checks.outs(spec, tuple(outs[n] for n in _checks.out_names(spec)), tensors[0], attrs)

    def backward(*args):  # one gradient per output, then the op's arguments
        tensors, attrs = _inputs(spec, args[output_count:])
        _checks.backward(spec, args[:output_count], tensors, attrs)
        return _one_or_tuple(tuple(_empty_like(t) for t in tensors))  # one per tensor input

    torch.library.register_fake(name, forward)
    torch.library.register_fake(f"{name}.out", forward_out)
    if spec.has_gradient:
        torch.library.register_fake(f"{name}_backward", backward)


# ---- first derivatives: the fused backward kernels ----------------------------------------
def _input_saver(spec: opforge_spec.OpSpec):
    """For an op or its backward: the tensors saved, the attributes (the last inputs) kept."""
    count = len(spec.attributes)

    def save_inputs(ctx, inputs, output):
        split = len(inputs) - count
        ctx.save_for_backward(*inputs[:split])
        ctx.attrs = tuple(inputs[split:])

    return save_inputs


def _no_attribute_gradients(spec: opforge_spec.OpSpec) -> tuple:
    return (None,) * len(spec.attributes)


def _zeros_where_undefined(spec: opforge_spec.OpSpec, grads: tuple, x: torch.Tensor) -> tuple:
    """One gradient per output, zeros for an output autograd gave none (it was not used)."""
    shapes = _checks.output_shapes(spec, x)
    return tuple(x.new_zeros(shape) if g is None else g for g, shape in zip(grads, shapes))


def _fused_gradient(spec: opforge_spec.OpSpec):
    backward = getattr(_ops, f"{spec.torch_name}_backward")

    def gradient(ctx, *grads):
        tensors = ctx.saved_tensors
        grads = backward(*_zeros_where_undefined(spec, grads, tensors[0]), *tensors, *ctx.attrs)
        grads = grads if isinstance(grads, tuple) else (grads,)
        return (*grads, *_no_attribute_gradients(spec))

    return gradient


# ---- second and higher derivatives: autograd through the spec's composed form ---------------
def _as_float32(value: float) -> float:
    """An attribute as the kernels see it (they compute with float32 beta/epsilon)."""
    if not isinstance(value, float):  # a symbolic float while tracing: left as is
        return value
    return struct.unpack("f", struct.pack("f", value))[0]


def _compute_dtype(t: torch.Tensor) -> torch.dtype:
    """float16/bfloat16 are computed in float32, as the kernels do."""
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def _composed_second_derivative(spec: opforge_spec.OpSpec):
    """The gradient of `spec`'s backward op: the backward op is the vector-Jacobian product of
    the op, so its own vector-Jacobian product is taken through the spec's composed form.
    torch.func.vjp keeps it differentiable to any order, under autograd and torch.func alike."""
    output_count = len(spec.outputs)

    def gradient(ctx, *upstream):
        saved = ctx.saved_tensors  # one gradient per output of the op, then its tensor inputs
        tensors = saved[output_count:]
        compute = _compute_dtype(tensors[0])
        attrs = tuple(_as_float32(a) for a in ctx.attrs)

        def op(*inputs):
            return spec.composed(*inputs, *attrs)

        def op_vjp(*values):
            grads, inputs = values[:output_count], values[output_count:]
            return torch.func.vjp(op, *inputs)[1](_one_or_tuple(grads))

        values = [t.to(compute) for t in saved]
        cotangents = tuple(torch.zeros_like(t) if u is None else u.to(compute)
                           for u, t in zip(upstream, values[output_count:]))
        grads = torch.func.vjp(op_vjp, *values)[1](cotangents)
        return (*(d.to(t.dtype) for d, t in zip(grads, saved)), *_no_attribute_gradients(spec))

    return gradient


# ---- the Autograd kernels --------------------------------------------------------------
_LIBRARY = torch.library.Library("opforge", "IMPL")  # kept: its registrations live as long as it


def _tracked(t) -> bool:
    """Whether autograd (reverse or forward mode, torch.func included) records a call on `t`."""
    if not isinstance(t, torch.Tensor):
        return False
    return (t.requires_grad and torch.is_grad_enabled()) or (
        torch.autograd.forward_ad.unpack_dual(t).tangent is not None)


def _refuse_forward_mode(spec: opforge_spec.OpSpec):
    def jvp(ctx, *tangents):
        raise RuntimeError(opforge_spec.error(
            spec.name, "derivative", "reverse mode (backward, torch.func.grad, vjp or jacrev)",
            "forward mode (jvp, jacfwd or forward_ad)"))

    return jvp


def _autograd_function(spec: opforge_spec.OpSpec, op, backward):
    """The autograd node of `op` (an op or a backward op of `spec`): the kernel below autograd
    forward, `backward` as its derivative.

    A single-level Function, as an aten op's autograd kernel is: the node is recorded at the
    torch.func level the dispatcher is at (their grad interpreter sends the op here, below the
    level where torch.autograd.Function.apply hands itself to the transforms, so that fails).
    functorch builds each level of a Function the same way."""
    return type(f"opforge_{op._opname}_autograd", (torch.autograd.function._SingleLevelFunction,), {
        # apply runs forward with grad mode off, so the op's Autograd kernel passes it down
        "forward": staticmethod(op),
        "setup_context": staticmethod(_input_saver(spec)),
        "backward": staticmethod(backward),
        "jvp": staticmethod(_refuse_forward_mode(spec)),
    })


def _register_autograd(spec: opforge_spec.OpSpec, name: str, backward) -> None:
    """The Autograd kernel of the op `name` (`spec`'s op or its backward op)."""
    op = getattr(_ops, name).default
    function = _autograd_function(spec, op, backward)
    tensor_count = len(op._schema.arguments) - len(spec.attributes)  # the attributes are last

    def autograd_kernel(keyset, *args):
        # The dispatcher drops trailing arguments equal to their defaults; setup_context needs them.
        args = _with_defaults(spec, args, tensor_count)
        if any(_tracked(t) for t in args):
            with enable_single_level_autograd_function():
                return function.apply(*args)
        return op.redispatch(keyset & torch._C._after_autograd_keyset, *args)

    _LIBRARY.impl(name, autograd_kernel, "Autograd", with_keyset=True)


# ---- ops without a gradient (OpSpec.has_gradient False) ------------------------------------
def _refuse_backward(spec: opforge_spec.OpSpec):
    def backward(ctx, *grads):
        raise RuntimeError(
            f"opforge.{spec.name} has no gradient: it is an inference op (its spec declares "
            f"has_gradient=False); call it under torch.no_grad() or torch.inference_mode(), or "
            f"differentiate another form (opforge_spec.OPS[{spec.name!r}].composed)")

    return backward


def _register_no_gradient(spec: opforge_spec.OpSpec) -> None:
    """The Autograd kernel of an op without a gradient: the call runs, and backward (reverse or
    forward mode) through any of its outputs is refused naming the op."""
    op = getattr(_ops, spec.torch_name).default
    function = type(f"opforge_{spec.torch_name}_no_gradient", (torch.autograd.function._SingleLevelFunction,), {
        "forward": staticmethod(op),
        "setup_context": staticmethod(lambda ctx, inputs, output: None),
        "backward": staticmethod(_refuse_backward(spec)),
        "jvp": staticmethod(_refuse_backward(spec)),
    })
    tensor_count = len(spec.inputs)

    def autograd_kernel(keyset, *args):
        args = _with_defaults(spec, args, tensor_count)
        if any(_tracked(t) for t in args):
            with enable_single_level_autograd_function():
                return function.apply(*args)
        return op.redispatch(keyset & torch._C._after_autograd_keyset, *args)

    _LIBRARY.impl(spec.torch_name, autograd_kernel, "Autograd", with_keyset=True)


def _register_out_autograd(spec: opforge_spec.OpSpec) -> None:
    """aten's out= rule: refused when autograd would record the call (the write into an output
    has no derivative). Each output's version counter is bumped (the ADInplaceOrView key's work,
    done here to spare a second Python kernel per call), so autograd refuses a saved tensor
    written over."""
    op = getattr(_ops, spec.torch_name).out

    def autograd_kernel(keyset, *args, **outs):
        tensors, _ = _inputs(spec, args)
        written = tuple(outs[n] for n in _checks.out_names(spec))
        _checks.out_not_tracked(spec, tensors, written, _tracked)
        op.redispatch(keyset & torch._C._after_ADInplaceOrView_keyset, *args, **outs)
        for out in written:
            torch.autograd.graph.increment_version(out)

    _LIBRARY.impl(f"{spec.torch_name}.out", autograd_kernel, "Autograd", with_keyset=True)


for _spec in opforge_spec.OPS.values():
    _register_fakes(_spec)
    if _spec.has_gradient:
        _register_autograd(_spec, _spec.torch_name, _fused_gradient(_spec))
        _register_autograd(_spec, f"{_spec.torch_name}_backward", _composed_second_derivative(_spec))
    else:
        _register_no_gradient(_spec)
    _register_out_autograd(_spec)
