"""Mixed dtypes (issue 31, Build 2): a float32 W beside a bfloat16/float16 X, computed in float32
with W as given, as HF's Gemma keeps its norm weight (the rule: opforge_spec.weight_dtypes; the
text: OpSpec.w_dtype_error). Outputs keep X's dtype, dW comes back in W's (float32). Every op of
the spec with a weight (RMSNorm, AddRMSNorm with R in X's dtype, RMSNormQuant, AddRMSNormQuant):
eager, .out, backward, opcheck, torch.compile, the fake kernels' refusals."""

import pytest
import torch
from conftest import CPU_DTYPES, CUDA_DTYPES, TORCH_DTYPES, require_cuda

import opforge_spec as spec
import opforge_torch

WEIGHTED = [op for op in spec.OPS.values() if "W" in op.inputs]
HALF = {"cpu": (torch.bfloat16,), "cuda": (torch.bfloat16, torch.float16)}
EPS = 1e-5
DEVICES = ["cpu", "cuda"]


def _inputs(dtype, device="cpu", shape=(16, 96), seed=0):
    """X (and R) in `dtype`, W in float32 with values bfloat16 cannot hold (Gemma's 1 + w)."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=gen).to(dtype)
    r = torch.randn(shape, generator=gen).to(dtype)
    w = 1.0 + 0.3 * torch.randn(shape[-1], generator=gen)
    return x.to(device), r.to(device), w.to(device)


def _skip_without(device):
    if device == "cuda":
        require_cuda()


# ---- forward: the float32 computation, rounded once --------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
def test_rms_norm_is_the_float32_computation_with_w_as_given(device):
    """Y of a 16-bit X with a float32 W is Y of X upcast to float32 (the same W), rounded to X's
    dtype: bit for bit. Rounding W to X's dtype first (what the op did before) moves about a
    quarter of the outputs, so the check would see it."""
    _skip_without(device)
    for dtype in HALF[device]:
        x, _, w = _inputs(dtype, device)
        y = opforge_torch.rms_norm(x, w, EPS)
        assert y.dtype == dtype
        want = opforge_torch.rms_norm(x.float(), w, EPS).to(dtype)
        assert torch.equal(y, want)
        rounded_w = opforge_torch.rms_norm(x, w.to(dtype), EPS)
        assert (rounded_w != want).float().mean() > 0.1


@pytest.mark.parametrize("device", DEVICES)
def test_add_rms_norm_rounds_h_then_normalizes_in_float32(device):
    """H = X + R in X's dtype (R keeps X's dtype), Y = RMSNorm of that H in float32 with W as given."""
    _skip_without(device)
    for dtype in HALF[device]:
        x, r, w = _inputs(dtype, device)
        y, h = opforge_torch.add_rms_norm(x, r, w, EPS)
        assert (y.dtype, h.dtype) == (dtype, dtype)
        assert torch.equal(h, x + r)
        assert torch.equal(y, opforge_torch.rms_norm(h.float(), w, EPS).to(dtype))


QUANTIZED = [op for op in WEIGHTED if op.output_dtypes]  # RMSNormQuant, AddRMSNormQuant


@pytest.mark.parametrize("quant_dtype", [3, 17], ids=["int8", "float8_e4m3fn"])
@pytest.mark.parametrize("op", QUANTIZED, ids=lambda op: op.name)
@pytest.mark.parametrize("device", DEVICES)
def test_quantized_outputs_are_the_float32_computation(device, op, quant_dtype):
    """Q and Scale of a 16-bit X with a float32 W are those of the float32 call on X upcast (with a
    residual: on H = X + R rounded to X's dtype, then upcast, and a zero R), the same W; H is X + R."""
    _skip_without(device)
    call = getattr(opforge_torch, op.torch_name)
    for dtype in HALF[device]:
        x, r, w = _inputs(dtype, device)
        h = x + r if "R" in op.inputs else x
        got = _as_tuple(call(*_args(op, x, r, w), EPS, quant_dtype))
        want = _as_tuple(call(*_args(op, h.float(), torch.zeros_like(h, dtype=torch.float32), w), EPS, quant_dtype))
        for name, value, expected in zip(op.outputs, got, want):
            if name in op.output_dtypes:
                assert value.dtype == expected.dtype and torch.equal(value.float(), expected.float()), name
            else:
                assert value.dtype == dtype and torch.equal(value, h), name


def _args(op, x, r, w):
    roles = {"X": x, "R": r, "W": w}
    return tuple(roles[n] for n in op.inputs)


def _as_tuple(result):
    return result if isinstance(result, tuple) else (result,)


@pytest.mark.parametrize("op", WEIGHTED, ids=lambda op: op.name)
@pytest.mark.parametrize("device", DEVICES)
def test_out_overloads_write_what_the_op_returns(device, op):
    _skip_without(device)
    x, r, w = _inputs(torch.bfloat16, device)
    args = (*_args(op, x, r, w), EPS)
    want = _as_tuple(getattr(torch.ops.opforge, op.torch_name)(*args))
    outs = {name: torch.full_like(t, 7) for name, t in zip(opforge_torch._checks.out_names(op), want)}
    getattr(torch.ops.opforge, op.torch_name).out(*args, **outs)
    for got, expected in zip(outs.values(), want):
        assert torch.equal(got.float(), expected.float())


# ---- backward: dX in X's dtype, dW in W's (float32) ----------------------------------------------
def _composed_gradients(op, x, r, w, grads):
    """dX (dR) and dW through the spec's composed form (H = X + R in X's dtype, then the norm in
    float32 with W as given)."""
    leaves = [t.detach().clone().requires_grad_() for t in _args(op, x, r, w)]
    torch.autograd.backward(_as_tuple(op.composed(*leaves, EPS)), grads)
    return [t.grad.float() for t in leaves]


@pytest.mark.parametrize("op", [o for o in WEIGHTED if o.has_gradient], ids=lambda op: op.name)
@pytest.mark.parametrize("device", DEVICES)
def test_backward_gives_dw_in_float32_as_the_composed_form(device, op):
    _skip_without(device)
    for dtype in HALF[device]:
        x, r, w = _inputs(dtype, device)
        leaves = [t.clone().requires_grad_() for t in _args(op, x, r, w)]
        outputs = _as_tuple(getattr(opforge_torch, op.torch_name)(*leaves, EPS))
        gen = torch.Generator().manual_seed(1)
        grads = [torch.randn(o.shape, generator=gen).to(dtype).to(device) for o in outputs]
        torch.autograd.backward(outputs, grads)
        want = _composed_gradients(op, x, r, w, grads)
        assert [t.grad.dtype for t in leaves] == [t.dtype for t in leaves]  # dW float32
        for leaf, expected in zip(leaves, want):
            scale = expected.abs().max()
            # dX rounds once to X's dtype; dW is accumulated in float32 as the composed form's
            bar = 1e-2 if leaf.dtype != torch.float32 else 1e-4
            assert (leaf.grad.float() - expected).abs().max() <= bar * scale, op.name


# ---- torch.library.opcheck, torch.compile ----------------------------------------------------------
def _mixed_samples(device):
    x, r, w = _inputs(torch.bfloat16, device, shape=(3, 5, 16))
    dy = torch.randn(x.shape, generator=torch.Generator().manual_seed(1)).to(x)
    samples = []
    for op in WEIGHTED:
        overload = getattr(torch.ops.opforge, op.torch_name)
        args = (*_args(op, x, r, w), EPS)
        outs = {name: torch.empty_like(t) for name, t in
                zip(opforge_torch._checks.out_names(op), _as_tuple(overload(*args)))}
        samples += [(overload.default, args, {}), (overload.out, args, outs)]
        if op.has_gradient:
            leaves = tuple(t.clone().requires_grad_() for t in _args(op, x, r, w))
            samples.append((overload.default, (*leaves, EPS), {}))
            backward = getattr(torch.ops.opforge, f"{op.torch_name}_backward").default
            grads = (dy,) * len(op.outputs)
            samples += [(backward, (*grads, *args), {}),
                        (backward, (*(g.clone().requires_grad_() for g in grads), *leaves, EPS), {})]
    return samples


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_on_the_mixed_signature(device):
    _skip_without(device)
    for overload, args, kwargs in _mixed_samples(device):
        torch.library.opcheck(overload, args, kwargs)


def test_torch_compile_fullgraph_forward_and_backward():
    x, r, w = _inputs(torch.bfloat16, shape=(4, 32))

    def block(x, r, w):
        y, h = opforge_torch.add_rms_norm(x, r, w, EPS)
        return opforge_torch.rms_norm(y, w, EPS), h

    eager_leaves = [t.clone().requires_grad_() for t in (x, r, w)]
    compiled_leaves = [t.clone().requires_grad_() for t in (x, r, w)]
    want = block(*eager_leaves)
    got = torch.compile(block, fullgraph=True, backend="aot_eager")(*compiled_leaves)
    for a, b in zip(got, want):
        assert a.dtype == torch.bfloat16 and torch.equal(a, b)
    sum(o.float().sum() for o in want).backward()
    sum(o.float().sum() for o in got).backward()
    for a, b in zip(compiled_leaves, eager_leaves):
        assert a.grad.dtype == b.dtype and torch.equal(a.grad, b.grad)


# ---- refusals: the spec's text, from the C++ kernels and the fake kernels alike --------------------
_REFUSED = [(torch.bfloat16, torch.float64), (torch.bfloat16, torch.float16), (torch.float32, torch.bfloat16),
            (torch.float64, torch.float32), (torch.float16, torch.float64), (torch.bfloat16, torch.int64)]


def _name(dtype):
    return str(dtype).removeprefix("torch.")


def _refusal(op, x_dtype, w_dtype):
    message = op.w_dtype_error(_name(x_dtype), _name(w_dtype))
    assert message is not None and message.startswith(f"opforge.{op.name}: W: expected dtype {_name(x_dtype)}")
    return message


@pytest.mark.parametrize("x_dtype, w_dtype", _REFUSED, ids=_name)
@pytest.mark.parametrize("op", WEIGHTED, ids=lambda op: op.name)
def test_refusals_name_the_op_w_and_the_rule(op, x_dtype, w_dtype):
    """Eager on the CPU (X of a CPU dtype: the C++ check) and on meta (the fake kernel), which
    torch.compile and torch.export run."""
    message = _refusal(op, x_dtype, w_dtype)
    x, r, _ = _inputs(torch.float32)
    devices = ["meta"] + (["cpu"] if _name(x_dtype) in CPU_DTYPES else [])
    for device in devices:
        x_, r_ = x.to(x_dtype).to(device), r.to(x_dtype).to(device)
        w = torch.ones(x.shape[-1], dtype=w_dtype, device=device)
        with pytest.raises(RuntimeError) as info:
            getattr(opforge_torch, op.torch_name)(*_args(op, x_, r_, w), EPS)
        assert str(info.value).splitlines()[0] == message, device


def test_refusal_under_torch_compile():
    x, _, _ = _inputs(torch.bfloat16)
    w = torch.ones(x.shape[-1], dtype=torch.float64)
    with pytest.raises(Exception, match=r"opforge\.RMSNorm: W: expected dtype bfloat16 \(dtype of X\) or "
                                        r"float32, got float64"):
        torch.compile(lambda a, b: opforge_torch.rms_norm(a, b, EPS), fullgraph=True, backend="eager")(x, w)


def test_residual_keeps_x_dtype():
    """R is not a weight: a float32 R beside a bfloat16 X is refused (H = X + R is X's dtype)."""
    x, r, w = _inputs(torch.bfloat16)
    with pytest.raises(RuntimeError, match=r"opforge\.AddRMSNorm: R: expected dtype bfloat16 \(dtype of X\), "
                                           r"got float32"):
        opforge_torch.add_rms_norm(x, r.float(), w, EPS)


@pytest.mark.parametrize("device", DEVICES)
def test_every_dtype_of_x_takes_its_own_dtype_of_w(device):
    """The rule's other half: W of X's dtype, every X dtype of the backend."""
    _skip_without(device)
    for name in CPU_DTYPES if device == "cpu" else CUDA_DTYPES:
        x, r, w = _inputs(TORCH_DTYPES[name], device)
        for op in WEIGHTED:
            outputs = _as_tuple(getattr(opforge_torch, op.torch_name)(*_args(op, x, r, w.to(x.dtype)), EPS))
            assert outputs[0].shape == x.shape
