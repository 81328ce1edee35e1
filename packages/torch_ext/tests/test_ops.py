"""The torch integration: opcheck, gradcheck, torch.compile, torch.export, errors."""

import pytest
import torch
from conftest import require_cuda, run_op

import opforge_spec as spec
import opforge_torch


def _rms_inputs(device="cpu", dtype=torch.float32, shape=(3, 5, 16)):
    torch.manual_seed(0)  # seeds every device's generator (a torch.Generator is one device's)
    x = torch.randn(*shape, device=device, dtype=dtype, requires_grad=True)
    w = (torch.rand(shape[-1], device=device, dtype=dtype) + 0.5).requires_grad_()
    return x, w


def _opcheck_samples(device):
    """(op overload, args, kwargs) covering every overload of every op (test_swiglu.py adds more)."""
    torch.manual_seed(0)
    x, w = _rms_inputs(device)
    gated = torch.randn(3, 5, 2 * 8, device=device, requires_grad=True)
    plain, weight, gated_plain = x.detach(), w.detach(), gated.detach()
    gated_grad = torch.randn(3, 5, 8, device=device)
    residual = torch.randn_like(x, requires_grad=True)
    res_plain = residual.detach()
    return [
        (torch.ops.opforge.add_rms_norm.default, (x, residual, w, 1e-5), {}),
        (torch.ops.opforge.add_rms_norm.default, (plain.transpose(0, 1), res_plain.transpose(0, 1), weight, 0.0), {}),
        (torch.ops.opforge.add_rms_norm.out, (plain, res_plain, weight, 1e-5),
         {"y_out": torch.empty_like(plain),
          "h_out": torch.empty(3, 5, 32, device=device)[..., ::2]}),  # non-contiguous: via a temporary
        (torch.ops.opforge.add_rms_norm_backward.default,
         (torch.randn_like(x), torch.randn_like(x), plain, res_plain, weight, 1e-5), {}),
        (torch.ops.opforge.add_rms_norm_backward.default,
         (torch.randn_like(x).requires_grad_(), torch.randn_like(x).requires_grad_(), x, residual, w, 1e-5), {}),
        (torch.ops.opforge.swish.default, (x, 1.5), {}),
        (torch.ops.opforge.swish.default, (plain[..., ::2], -0.5), {}),
        (torch.ops.opforge.rms_norm.default, (x, w, 1e-5), {}),
        (torch.ops.opforge.rms_norm.default, (plain.transpose(0, 1), weight, 0.0), {}),
        (torch.ops.opforge.swiglu.default, (gated, 1.5), {}),
        (torch.ops.opforge.geglu.default, (gated,), {}),
        (torch.ops.opforge.swish.out, (plain, 1.5), {"out": torch.empty_like(plain)}),
        (torch.ops.opforge.rms_norm.out, (plain, weight, 1e-5), {"out": torch.empty_like(plain)}),
        (torch.ops.opforge.swiglu.out, (gated_plain, 1.5),
         {"out": torch.empty_like(gated_plain)[..., ::2]}),  # non-contiguous: via a temporary
        (torch.ops.opforge.geglu.out, (gated_plain,), {"out": torch.empty_like(gated_plain)[..., ::2]}),
        (torch.ops.opforge.swish_backward.default, (torch.randn_like(x), plain, 1.5), {}),
        (torch.ops.opforge.rms_norm_backward.default, (torch.randn_like(x), plain, weight, 1e-5), {}),
        (torch.ops.opforge.swiglu_backward.default, (gated_grad, gated_plain, 1.5), {}),
        (torch.ops.opforge.geglu_backward.default, (gated_grad, gated_plain), {}),
        # the backward ops are differentiable too (double backward): opcheck checks their autograd
        (torch.ops.opforge.swish_backward.default, (torch.randn_like(x).requires_grad_(), x, 1.5), {}),
        (torch.ops.opforge.rms_norm_backward.default, (torch.randn_like(x).requires_grad_(), x, w, 1e-5), {}),
        (torch.ops.opforge.swiglu_backward.default, (gated_grad.clone().requires_grad_(), gated, 1.5), {}),
        (torch.ops.opforge.geglu_backward.default, (gated_grad.clone().requires_grad_(), gated), {}),
        # no gradient, integer Q: inputs that autograd does not record (float8 Q: test_rms_norm_quant.py)
        (torch.ops.opforge.rms_norm_quant.default, (plain, weight, 1e-5, 3, 0.0), {}),
        (torch.ops.opforge.rms_norm_quant.default, (plain.transpose(0, 1), weight, 0.0, 3, 0.5), {}),
        (torch.ops.opforge.rms_norm_quant.out, (plain, weight, 1e-5, 3, 0.0),
         {"q_out": torch.empty(3, 5, 16, dtype=torch.int8, device=device),
          "scale_out": torch.empty(3, 5, 2, device=device)[..., :1]}),  # non-contiguous: via a temporary
    ]


def _spec_samples(device, covered: set) -> list:
    """(op overload, args, kwargs) from the spec for every op of a launcher family whose overloads
    the list above does not name (an op added as its two files): the op on its first case, its
    .out overload (each output of its own dtype and shape) and, for an op with a gradient, its
    backward (plain, then recorded by autograd: double backward)."""
    samples = []
    torch.manual_seed(0)  # the gradients' draws below
    for op in spec.OPS.values():
        if op.family is None or getattr(torch.ops.opforge, op.torch_name).default in covered:
            continue
        case = op.cases("float32")[0]
        plain = [torch.tensor(a, dtype=torch.float32, device=device) for a in case.inputs]
        leaves = [t.clone().requires_grad_() for t in plain]
        attrs = tuple(op.defaults().values())
        shapes = [op.output_shape_of(o, plain[0].shape) for o in op.outputs]
        dtypes = [getattr(torch, op.output_dtype(o, "float32")) for o in op.outputs]
        outs = dict(zip(opforge_torch_out_names(op),
                        (torch.empty(s, dtype=d, device=device) for s, d in zip(shapes, dtypes))))
        forward = getattr(torch.ops.opforge, op.torch_name)
        if not op.has_gradient:  # inputs that autograd does not record
            samples += [(forward.default, (*plain, *attrs), {}), (forward.out, (*plain, *attrs), outs)]
            continue
        grads = [torch.randn(s, device=device) for s in shapes]
        backward = getattr(torch.ops.opforge, f"{op.torch_name}_backward")
        samples += [(forward.default, (*leaves, *attrs), {}), (forward.out, (*plain, *attrs), outs),
                    (backward.default, (*grads, *plain, *attrs), {}),
                    (backward.default, (*(g.clone().requires_grad_() for g in grads), *leaves, *attrs), {})]
    return samples


def opforge_torch_out_names(op) -> list:
    """The .out overload's keywords: `out`, or `<output>_out` for each of several outputs."""
    return ["out"] if len(op.outputs) == 1 else [f"{o.lower()}_out" for o in op.outputs]


def _every_overload():
    names = [n for op in spec.OPS.values()
             for n in (op.torch_name, *((f"{op.torch_name}_backward",) if op.has_gradient else ()))]
    return {getattr(getattr(torch.ops.opforge, n), o) for n in names
            for o in getattr(torch.ops.opforge, n).overloads()}


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_opcheck_every_overload_with_every_default_check(device):
    if device == "cuda":
        require_cuda()
    torch.manual_seed(0)
    samples = _opcheck_samples(device)
    samples += _spec_samples(device, {op for op, _, _ in samples})
    assert {op for op, _, _ in samples} == _every_overload()
    for op, args, kwargs in samples:
        torch.library.opcheck(op, args, kwargs)


def test_gradcheck_float64():
    torch.manual_seed(0)
    x, w = _rms_inputs(dtype=torch.float64, shape=(4, 7))
    assert torch.autograd.gradcheck(lambda a: opforge_torch.swish(a, 1.3), (x,))
    assert torch.autograd.gradcheck(lambda a: opforge_torch.swish(a, 0.0), (x,))
    assert torch.autograd.gradcheck(lambda a, b: opforge_torch.rms_norm(a, b, 1e-5), (x, w))


@pytest.mark.parametrize("outputs", [(0,), (1,), (0, 1)], ids=["Y", "H", "Y-and-H"])
def test_gradcheck_float64_add_rms_norm_each_output_and_both(outputs):
    """Both outputs are differentiable; an output that is not used gets no gradient (zeros)."""
    torch.manual_seed(0)
    x, w = _rms_inputs(dtype=torch.float64, shape=(4, 7))
    r = torch.randn_like(x, requires_grad=True)

    def used(a, b, c):
        y_h = opforge_torch.add_rms_norm(a, b, c, 1e-5)
        return tuple(y_h[i] for i in outputs)

    assert torch.autograd.gradcheck(used, (x, r, w))


class _Block(torch.nn.Module):
    def __init__(self, dim=16):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.rand(dim, generator=torch.Generator().manual_seed(0)) + 0.5)

    def forward(self, x):
        return opforge_torch.rms_norm(opforge_torch.swish(x, 1.702), self.weight, 1e-6) * 2.0


def test_torch_compile_fullgraph_forward_and_backward():
    torch.manual_seed(0)
    torch._dynamo.reset()
    model = _Block()
    x = torch.randn(4, 16, requires_grad=True)
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    expected = model(x)
    got = compiled(x)
    torch.testing.assert_close(got, expected)
    (gx,) = torch.autograd.grad(got.sum(), x)
    (ex,) = torch.autograd.grad(expected.sum(), x)
    torch.testing.assert_close(gx, ex)


def test_torch_compile_inductor():
    torch.manual_seed(0)
    torch._dynamo.reset()
    model = _Block()
    x = torch.randn(2, 3, 16)
    torch.testing.assert_close(torch.compile(model, fullgraph=True)(x), model(x))


def test_torch_export_keeps_one_node_per_call():
    torch.manual_seed(0)
    model = _Block()
    batch = torch.export.Dim("batch")
    program = torch.export.export(model, (torch.randn(4, 16),), dynamic_shapes={"x": {0: batch}})
    targets = [n.target for n in program.graph.nodes if n.op == "call_function"]
    assert targets.count(torch.ops.opforge.swish.default) == 1
    assert targets.count(torch.ops.opforge.rms_norm.default) == 1
    x = torch.randn(7, 16)
    torch.testing.assert_close(program.module()(x), model(x))


@pytest.mark.parametrize("case", [c for op in spec.OPS.values() for c in op.bad_cases()],
                         ids=lambda c: c.name)
def test_spec_bad_cases_raise_runtime_error(case):
    op = spec.OPS[case.mentions[0].removeprefix("opforge.")]
    inputs = [torch.from_numpy(a) for a in case.inputs]
    with pytest.raises(RuntimeError) as info:
        run_op(op, inputs, case.attrs)
    for text in case.mentions:
        assert text in str(info.value)


X = torch.ones(2, 64)
W = torch.ones(64)


@pytest.mark.parametrize("call,message", [
    (lambda: opforge_torch.swish(torch.ones(3, dtype=torch.int64)),
     spec.error("Swish", "X", "float32, float64 or bfloat16 tensor on CPU", "int64")),
    (lambda: opforge_torch.swish(torch.ones(3, dtype=torch.float16)),
     spec.error("Swish", "X", "float32, float64 or bfloat16 tensor on CPU", "float16")),
    (lambda: opforge_torch.swish(X, float("inf")),
     spec.error("Swish", "beta", "a finite float32", "inf")),
    (lambda: opforge_torch.rms_norm(torch.tensor(1.0), W),
     spec.error("RMSNorm", "X", "a tensor of rank >= 1", "rank 0")),
    (lambda: opforge_torch.rms_norm(X, torch.ones(32)),
     spec.error("RMSNorm", "W", "1-D tensor of length 64 (last dim of X)", "shape [32]")),
    (lambda: opforge_torch.rms_norm(X, torch.ones(1, 64)),
     spec.error("RMSNorm", "W", "1-D tensor of length 64 (last dim of X)", "shape [1, 64]")),
    (lambda: opforge_torch.rms_norm(X, W.double()),
     spec.error("RMSNorm", "W", "dtype float32 (dtype of X)", "float64")),
    (lambda: opforge_torch.rms_norm(X, W, float("nan")),
     spec.error("RMSNorm", "epsilon", "a finite float32 >= 0", "nan")),
    (lambda: opforge_torch.rms_norm(X, W, -1e-6),
     spec.error("RMSNorm", "epsilon", "a finite float32 >= 0", "-1e-06")),
    (lambda: torch.ops.opforge.swish_backward(torch.ones(3), X, 1.0),
     spec.error("Swish", "dY", "shape [2, 64] (shape of X)", "[3]")),
    (lambda: torch.ops.opforge.rms_norm_backward(X.double(), X, W, 1e-6),
     spec.error("RMSNorm", "dY", "dtype float32 (dtype of X)", "float64")),
    (lambda: opforge_torch.add_rms_norm(X, torch.ones(2, 63), W),
     spec.error("AddRMSNorm", "R", "a tensor of shape [2, 64] (the shape of X)", "shape [2, 63]")),
    (lambda: opforge_torch.add_rms_norm(X, torch.ones(1, 64), W),
     spec.error("AddRMSNorm", "R", "a tensor of shape [2, 64] (the shape of X)", "shape [1, 64]")),
    (lambda: opforge_torch.add_rms_norm(X, torch.ones(64), W),
     spec.error("AddRMSNorm", "R", "a tensor of shape [2, 64] (the shape of X)", "shape [64]")),
    (lambda: opforge_torch.add_rms_norm(X, X.double(), W),
     spec.error("AddRMSNorm", "R", "dtype float32 (dtype of X)", "float64")),
    (lambda: opforge_torch.add_rms_norm(X, X, W.double()),
     spec.error("AddRMSNorm", "W", "dtype float32 (dtype of X)", "float64")),
    (lambda: opforge_torch.add_rms_norm(X, X, W, -1.0),
     spec.error("AddRMSNorm", "epsilon", "a finite float32 >= 0", "-1")),
    (lambda: torch.ops.opforge.add_rms_norm_backward(X, torch.ones(2, 8), X, X, W, 1e-6),
     spec.error("AddRMSNorm", "dH", "shape [2, 64] (shape of X)", "[2, 8]")),
    (lambda: torch.ops.opforge.add_rms_norm_backward(X.double(), X, X, X, W, 1e-6),
     spec.error("AddRMSNorm", "dY", "dtype float32 (dtype of X)", "float64")),
], ids=["int64", "float16-cpu", "beta-inf", "rank0", "w-length", "w-rank", "w-dtype", "eps-nan",
        "eps-negative", "dy-shape", "dy-dtype", "r-shape", "r-broadcast", "r-rank", "r-dtype",
        "add-w-dtype", "add-eps-negative", "dh-shape", "add-dy-dtype"])
def test_errors_use_the_canonical_message(call, message):
    with pytest.raises(RuntimeError) as info:
        call()
    assert message in str(info.value)


def test_weight_on_another_device():
    require_cuda()
    with pytest.raises(RuntimeError, match=r"opforge.RMSNorm: W: expected a tensor on cuda:0"):
        opforge_torch.rms_norm(X.cuda(), W, 1e-6)


def test_residual_on_another_device():
    require_cuda()
    with pytest.raises(RuntimeError, match=r"opforge\.AddRMSNorm: R: expected a tensor on cuda:0 \(device of X\), got cpu"):
        opforge_torch.add_rms_norm(X.cuda(), X, W.cuda(), 1e-6)


def test_cuda_dtypes_and_autograd():
    require_cuda()
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        x, w = _rms_inputs("cuda", dtype)
        y = opforge_torch.rms_norm(opforge_torch.swish(x, 1.0), w)
        y.float().sum().backward()
        assert x.grad.dtype == dtype and w.grad.dtype == dtype
    with pytest.raises(RuntimeError, match="float32, float16 or bfloat16 tensor on CUDA, got float64"):
        opforge_torch.swish(torch.ones(2, device="cuda", dtype=torch.float64))


def test_cuda_add_rms_norm_dtypes_and_both_outputs_gradients():
    require_cuda()
    torch.manual_seed(0)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        x, w = _rms_inputs("cuda", dtype)
        r = torch.randn_like(x, requires_grad=True)
        y, h = opforge_torch.add_rms_norm(x, r, w)
        (y.float().sum() + h.float().pow(2).sum()).backward()
        assert x.grad.dtype == r.grad.dtype == w.grad.dtype == dtype
        assert torch.equal(x.grad, r.grad)
        ey, eh = spec.ADD_RMS_NORM.composed(x.detach(), r.detach(), w.detach())  # H in X's dtype too
        torch.testing.assert_close(h, eh, rtol=0, atol=0)
        # against the composed form in X's dtype, not a float64 reference: its own steps round
        # too (bfloat16: up to 2**-8 each), on top of the spec's 1.6e-2 for the kernel's
        torch.testing.assert_close(y.float(), ey.float(), rtol=2e-2, atol=2e-2)


_ATTRIBUTES = [(op, name) for op in spec.OPS.values() for name in op.attributes]


@pytest.mark.parametrize("op, name", _ATTRIBUTES, ids=[f"{op.name}-{name}" for op, name in _ATTRIBUTES])
def test_layer_defaults_are_the_spec_defaults(op, name):
    """Called without the attributes, the schema's defaults apply: the spec's, and not ignored."""
    torch.manual_seed(0)
    x = torch.randn(4, 2 * 8)
    roles = {"X": x, "R": torch.randn_like(x), "W": torch.rand(16) + 0.5}
    inputs = tuple(roles[n] for n in op.inputs)
    fn = getattr(torch.ops.opforge, op.torch_name)
    wrapper = getattr(opforge_torch, op.torch_name)
    defaults = op.defaults()
    torch.testing.assert_close(fn(*inputs), fn(*inputs, *defaults.values()), rtol=0, atol=0)
    torch.testing.assert_close(wrapper(*inputs), fn(*inputs, *defaults.values()), rtol=0, atol=0)
    changed = {**defaults, name: _another_value(op.attributes[name])}
    outputs, changed_outputs = _all_outputs(fn(*inputs)), _all_outputs(fn(*inputs, *changed.values()))
    assert any(a.dtype != b.dtype or not torch.equal(a, b) for a, b in zip(outputs, changed_outputs)), \
        f"{op.name}: {name} has no effect"


def _another_value(attr):
    """A valid value other than the default: another choice of an enum, a larger int or float."""
    if attr.kind == "enum":
        return next(v for v in attr.choices.values() if v != attr.default)
    return int(attr.default) * 3 + 1 if attr.kind == "int" else attr.default * 3 + 0.5


def _all_outputs(result) -> tuple:
    return result if isinstance(result, tuple) else (result,)


class _ResidualBlock(torch.nn.Module):
    """A decoder layer's pre-norm step: H = X + R, Y = RMSNorm(H); both outputs used."""

    def __init__(self, dim=16):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.rand(dim, generator=torch.Generator().manual_seed(0)) + 0.5)

    def forward(self, x, residual):
        y, h = opforge_torch.add_rms_norm(x, residual, self.weight, 1e-6)
        return opforge_torch.swish(y, 1.0) + h


def test_torch_compile_and_export_of_a_residual_block():
    torch.manual_seed(0)
    torch._dynamo.reset()
    model = _ResidualBlock()
    x, r = torch.randn(4, 16, requires_grad=True), torch.randn(4, 16, requires_grad=True)
    got = torch.compile(model, fullgraph=True, backend="aot_eager")(x, r)
    expected = model(x, r)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(torch.autograd.grad(got.sum(), (x, r)),
                               torch.autograd.grad(expected.sum(), (x, r)))
    batch = torch.export.Dim("batch")
    program = torch.export.export(model, (x.detach(), r.detach()),
                                  dynamic_shapes={"x": {0: batch}, "residual": {0: batch}})
    targets = [n.target for n in program.graph.nodes if n.op == "call_function"]
    assert targets.count(torch.ops.opforge.add_rms_norm.default) == 1
    x7, r7 = torch.randn(7, 16), torch.randn(7, 16)
    torch.testing.assert_close(program.module()(x7, r7), model(x7, r7))
