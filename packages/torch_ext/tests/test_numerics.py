"""Results against the opforge_spec float64 reference for every spec case and dtype."""

import numpy as np
import pytest
import torch
from conftest import CPU_DTYPES, CUDA_DTYPES, require_cuda, run_op, to_numpy, to_torch

import opforge_spec as spec


def _cases(dtypes):
    for op in spec.OPS.values():
        for dtype in dtypes:
            for case in op.cases(dtype):
                yield pytest.param(op, dtype, case, id=f"{op.name}-{dtype}-{case.name}")


def _check(op, dtype, case, device):
    inputs = [to_torch(a, dtype, device, case.non_contiguous) for a in case.inputs]
    if op.x_error(inputs[0].shape) is not None:
        pytest.skip(f"X of this shape is an error for {op.name} (tested in test_ops.py)")
    result = run_op(op, inputs, case.attrs)
    outputs = result if isinstance(result, tuple) else (result,)
    x = inputs[0]
    # each output's shape and dtype by its rule (the op's shape, X's, or X's with the last dim 1;
    # X's dtype, or its own: fixed or picked by an attribute)
    shapes = [op.output_shape_of(name, x.shape) for name in op.outputs]
    assert [tuple(t.shape) for t in outputs] == [tuple(s) for s in shapes]
    assert [t.dtype for t in outputs] == [getattr(torch, op.output_dtype(name, dtype, case.attrs))
                                          for name in op.outputs]
    expected = op.reference(*case.inputs, **case.attrs)
    actual = tuple(to_numpy(t) for t in outputs)
    op.check_close(actual if len(actual) > 1 else actual[0], expected, dtype, inputs=case.inputs,
                   label=case.name, attrs=case.attrs)


@pytest.mark.parametrize("op,dtype,case", list(_cases(CPU_DTYPES)))
def test_cpu_matches_reference(op, dtype, case):
    _check(op, dtype, case, "cpu")


# Without a GPU one skip stands for all CUDA cases.
_CUDA_CASES = list(_cases(CUDA_DTYPES)) if torch.cuda.is_available() else [
    pytest.param(None, None, None, id="all-cases")]


@pytest.mark.parametrize("op,dtype,case", _CUDA_CASES)
def test_cuda_matches_reference(op, dtype, case):
    require_cuda()
    _check(op, dtype, case, "cuda")


def _rms_norm_grads64(x, w, eps):
    """dX, dW of sum(Y * G) from torch autograd on the composed float64 formula."""
    x = x.detach().double().requires_grad_()
    w = w.detach().double().requires_grad_()
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w
    g = torch.linspace(-1, 1, y.numel(), dtype=torch.float64).reshape(y.shape)
    dx, dw = torch.autograd.grad((y * g).sum(), (x, w))
    return g, dx, dw


# bfloat16 (8 bits: 2**-8 = 3.9e-3 a step): dX = (g*w - x*c) / rms rounds g, x, w, the product and
# the result, and its two terms cancel, so its error follows |g*w| (~1 here), not the result:
# 1e-2 absolute is ~2.5 steps at 1 (the worst of 20 seeds needs 2e-3); dW sums rows: atol * rows
@pytest.mark.parametrize("dtype,rtol,atol", [("float32", *spec.RMS_NORM.tolerance("float32")),
                                             ("bfloat16", 3e-2, 1e-2)])
@pytest.mark.parametrize("shape", [(300, 257), (3, 5, 8)], ids=["multi-block", "small"])
def test_rms_norm_backward_against_composed(dtype, rtol, atol, shape):
    torch.manual_seed(0)
    x = torch.randn(*shape, dtype=torch.float64)
    w = torch.rand(shape[-1], dtype=torch.float64) + 0.5
    g, dx64, dw64 = _rms_norm_grads64(x, w, 1e-5)
    cast = lambda t: t.to(getattr(torch, dtype))  # noqa: E731
    dx, dw = torch.ops.opforge.rms_norm_backward(cast(g), cast(x), cast(w), 1e-5)
    # bf16 inputs are rounded, so compare against the reference on the rounded values.
    if dtype == "bfloat16":
        g, dx64, dw64 = _rms_norm_grads64(cast(x), cast(w), 1e-5)
    torch.testing.assert_close(dx.double(), dx64, rtol=rtol, atol=atol)
    torch.testing.assert_close(dw.double(), dw64, rtol=rtol, atol=atol * shape[0])


def _add_rms_norm_grads64(x, r, w, eps):
    """dX, dR, dW of sum(Y * GY + H * GH) from torch autograd on the composed float64 formula."""
    x, r, w = (t.detach().double().requires_grad_() for t in (x, r, w))
    y, h = spec.ADD_RMS_NORM.composed(x, r, w, eps)
    gy = torch.linspace(-1, 1, y.numel(), dtype=torch.float64).reshape(y.shape)
    gh = torch.linspace(1, -0.5, h.numel(), dtype=torch.float64).reshape(h.shape)
    return (gy, gh), torch.autograd.grad((y * gy).sum() + (h * gh).sum(), (x, r, w))


@pytest.mark.parametrize("dtype,rtol,atol", [("float32", *spec.ADD_RMS_NORM.tolerance("float32")),
                                             ("float64", *spec.ADD_RMS_NORM.tolerance("float64")),
                                             ("bfloat16", 3e-2, 1e-2)])  # as RMSNorm's above
@pytest.mark.parametrize("shape", [(300, 257), (3, 5, 8)], ids=["multi-block", "small"])
def test_add_rms_norm_backward_against_composed(dtype, rtol, atol, shape):
    torch.manual_seed(0)
    cast = lambda t: t.to(getattr(torch, dtype))  # noqa: E731
    x, r = cast(torch.randn(*shape, dtype=torch.float64)), cast(torch.randn(*shape, dtype=torch.float64))
    w = cast(torch.rand(shape[-1], dtype=torch.float64) + 0.5)
    # the reference on the rounded inputs, with H = X + R rounded as the kernels store it
    h = cast(x.double() + r.double())
    (gy, gh), (dh64, _, dw64) = _add_rms_norm_grads64(h, torch.zeros_like(h), w, 1e-5)
    dx, dr, dw = torch.ops.opforge.add_rms_norm_backward(cast(gy), cast(gh), x, r, w, 1e-5)
    assert torch.equal(dx, dr) and dx.data_ptr() != dr.data_ptr()
    torch.testing.assert_close(dx.double(), dh64, rtol=rtol, atol=atol)
    torch.testing.assert_close(dw.double(), dw64, rtol=rtol, atol=atol * shape[0])


def test_swish_backward_against_composed():
    torch.manual_seed(0)
    x = torch.randn(70000, dtype=torch.float64)  # > one parallel_for grain
    g = torch.randn_like(x)
    xr = x.clone().requires_grad_()
    (expected,) = torch.autograd.grad((xr * torch.sigmoid(1.3 * xr) * g).sum(), xr)
    got = torch.ops.opforge.swish_backward(g.float(), x.float(), 1.3)
    rtol, atol = spec.SWISH.tolerance("float32")
    torch.testing.assert_close(got.double(), expected, rtol=rtol, atol=atol)


def test_non_contiguous_transposed_input():
    torch.manual_seed(0)
    x = torch.randn(16, 24).t()  # not a strided slice: a transpose
    w = torch.rand(16) + 0.5
    assert not x.is_contiguous()
    torch.testing.assert_close(torch.ops.opforge.swish(x, 0.7), x * torch.sigmoid(0.7 * x))
    ref = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    torch.testing.assert_close(torch.ops.opforge.rms_norm(x, w, 1e-6), ref)


def test_empty_gradients():
    x = torch.zeros(0, 8, requires_grad=True)
    w = torch.ones(8, requires_grad=True)
    torch.ops.opforge.rms_norm(x, w, 1e-6).sum().backward()
    assert x.grad.shape == (0, 8) and torch.equal(w.grad, torch.zeros(8))
    x.grad, w.grad = None, None
    r = torch.zeros(0, 8, requires_grad=True)
    y, h = torch.ops.opforge.add_rms_norm(x, r, w, 1e-6)
    (y.sum() + h.sum()).backward()
    assert x.grad.shape == r.grad.shape == (0, 8) and torch.equal(w.grad, torch.zeros(8))
    np.testing.assert_array_equal(to_numpy(torch.ops.opforge.swish(torch.zeros(0), 1.0)), [])


def _every_cpu_op(x, w, g):
    """Forward and backward of each op on inputs spanning several parallel_for grains."""
    half = x[:, : x.shape[1] // 2]
    return [torch.ops.opforge.swish(x, 1.3), torch.ops.opforge.swish_backward(g, x, 1.3),
            torch.ops.opforge.rms_norm(x, w, 1e-5),
            *torch.ops.opforge.rms_norm_backward(g, x, w, 1e-5),
            torch.ops.opforge.swiglu(x, 0.9), torch.ops.opforge.swiglu_backward(g[:, : half.shape[1]], x, 0.9),
            *torch.ops.opforge.add_rms_norm(x, g, w, 1e-5),
            *torch.ops.opforge.add_rms_norm_backward(g, x.flip(0), x, g, w, 1e-5)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_results_do_not_depend_on_the_thread_count(dtype):
    """The threaded paths (parallel_for chunks, dW partial sums per row block) run with 4 threads
    and equal the single-threaded results bit for bit, whatever thread count the run gives each
    test process (a pytest-xdist worker gets one per core it owns)."""
    torch.manual_seed(0)
    x = torch.randn(512, 1024, dtype=dtype)  # 16 grains of 32K elements
    w = (torch.rand(1024) + 0.5).to(dtype)
    g = torch.randn_like(x)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        single = _every_cpu_op(x, w, g)
        torch.set_num_threads(4)
        threaded = _every_cpu_op(x, w, g)
    finally:
        torch.set_num_threads(before)
    for i, (a, b) in enumerate(zip(single, threaded)):
        assert torch.equal(a, b), f"output {i}: 1 vs 4 threads differ by {(a - b).abs().max()}"
