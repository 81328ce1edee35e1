"""Second and higher derivatives: gradient penalties and Hessian-vector products.

The backward ops had no autograd formula, so differentiating a gradient gave 0.0 (or "not used
in the graph") with only a UserWarning. Now they do: gradgradcheck in float64 and the composed
torch formulas are the references.
"""

import warnings

import pytest
import torch

import opforge_spec as spec
import opforge_torch


def _composed_swish(x, beta):
    return x * torch.sigmoid(beta * x)


def _composed_rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _inputs(shape=(3, 7), dtype=torch.float64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=gen, dtype=dtype).requires_grad_()
    w = (torch.rand(shape[-1], generator=gen, dtype=dtype) + 0.5).requires_grad_()
    return x, w


@pytest.mark.parametrize("beta", [1.0, 1.702, 0.0, -0.75])
def test_swish_gradgradcheck(beta):
    x, _ = _inputs()
    assert torch.autograd.gradgradcheck(lambda a: opforge_torch.swish(a, beta), (x,))


@pytest.mark.parametrize("eps", [1e-5, 0.25])
@pytest.mark.parametrize("shape", [(3, 7), (2, 3, 5), (6,)], ids=["2d", "3d", "1d"])
def test_rms_norm_gradgradcheck_with_weight(eps, shape):
    x, w = _inputs(shape)
    assert torch.autograd.gradgradcheck(lambda a, b: opforge_torch.rms_norm(a, b, eps), (x, w))


@pytest.mark.parametrize("outputs", [(0,), (1,), (0, 1)], ids=["Y", "H", "Y-and-H"])
@pytest.mark.parametrize("eps", [1e-5, 0.25])
def test_add_rms_norm_gradgradcheck_with_each_output(eps, outputs):
    x, w = _inputs((3, 7))
    torch.manual_seed(10)  # not _inputs' seed: its first draws would be x again
    r = torch.randn_like(x).requires_grad_()

    def used(a, b, c):
        y_h = opforge_torch.add_rms_norm(a, b, c, eps)
        return tuple(y_h[i] for i in outputs)

    assert torch.autograd.gradgradcheck(used, (x, r, w))


def test_backward_ops_gradcheck_directly():
    """The backward ops' own formulas against finite differences, every input including dY (and dH)."""
    x, w = _inputs()
    torch.manual_seed(10)
    g = torch.randn_like(x).requires_grad_()
    g_h = torch.randn_like(x).requires_grad_()
    r = torch.randn_like(x).requires_grad_()
    ops = torch.ops.opforge
    assert torch.autograd.gradcheck(lambda a, b: ops.swish_backward(a, b, 1.3), (g, x))
    assert torch.autograd.gradcheck(lambda a, b, c: ops.rms_norm_backward(a, b, c, 1e-5), (g, x, w))
    assert torch.autograd.gradcheck(lambda *t: ops.add_rms_norm_backward(*t, 1e-5), (g, g_h, x, r, w))


# float64 bars: both sides are exact formulas that round differently (2**-52 = 2.2e-16 a step);
# a second derivative chains tens of steps, RMSNorm's with cancelling terms, hence 1e-10..1e-9
# relative rather than the spec's forward bars (Swish 1e-12)
def _second_derivatives(fn, inputs, vector):
    """Hessian-vector product of sum(fn(*inputs) * probe) with `vector`, for every input."""
    out = fn(*inputs)
    probe = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape)
    grads = torch.autograd.grad((out * probe).sum(), inputs, create_graph=True)
    dot = sum((g * v).sum() for g, v in zip(grads, vector))
    return torch.autograd.grad(dot, inputs)


def test_swish_hessian_vector_product_matches_composed():
    x, _ = _inputs(seed=1)
    torch.manual_seed(11)
    v = (torch.randn_like(x),)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the old path only warned
        got = _second_derivatives(lambda a: opforge_torch.swish(a, 1.3), (x,), v)
    expected = _second_derivatives(lambda a: _composed_swish(a, 1.2999999523162842), (x,), v)
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)
    assert got[0].abs().max() > 0.1  # not the zeros of the old path


def test_rms_norm_hessian_vector_product_matches_composed():
    x, w = _inputs(seed=2)
    torch.manual_seed(12)
    v = (torch.randn_like(x), torch.randn_like(w))
    eps = 1e-5
    eps32 = float(torch.tensor(eps, dtype=torch.float32))  # the kernels' epsilon
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = _second_derivatives(lambda a, b: opforge_torch.rms_norm(a, b, eps), (x, w), v)
    expected = _second_derivatives(lambda a, b: _composed_rms_norm(a, b, eps32), (x, w), v)
    torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-11)
    assert all(t.abs().max() > 0.1 for t in got)


def test_add_rms_norm_hessian_vector_product_matches_composed():
    x, w = _inputs(seed=5)
    torch.manual_seed(15)
    r = torch.randn_like(x).requires_grad_()
    v = (torch.randn_like(x), torch.randn_like(x), torch.randn_like(w))
    eps32 = float(torch.tensor(1e-5, dtype=torch.float32))  # the kernels' epsilon

    def both(fn):  # the two outputs side by side: one tensor for _second_derivatives' probe
        return lambda a, b, c: torch.cat(fn(a, b, c, eps32), dim=-1)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = _second_derivatives(both(opforge_torch.add_rms_norm), (x, r, w), v)
    expected = _second_derivatives(both(spec.ADD_RMS_NORM.composed), (x, r, w), v)
    torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-11)
    assert all(t.abs().max() > 0.1 for t in got)


def test_gradient_penalty_of_a_block_matches_composed():
    """A WGAN-GP style penalty ||dL/dx||^2 through both ops, its gradient w.r.t. the weight."""
    def penalty(norm, act):
        x, w = _inputs((4, 9), seed=3)
        loss = norm(act(x), w).pow(2).sum()
        (gx,) = torch.autograd.grad(loss, x, create_graph=True)
        return torch.autograd.grad(gx.pow(2).sum(), (x, w))

    got = penalty(lambda a, b: opforge_torch.rms_norm(a, b, 0.0),
                  lambda a: opforge_torch.swish(a, 1.0))
    expected = penalty(lambda a, b: _composed_rms_norm(a, b, 0.0), lambda a: _composed_swish(a, 1.0))
    torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-10)


def test_third_derivative_of_swish_matches_composed():
    x = torch.linspace(-3, 3, 13, dtype=torch.float64, requires_grad=True)

    def third(fn):
        (d1,) = torch.autograd.grad(fn(x).sum(), x, create_graph=True)
        (d2,) = torch.autograd.grad(d1.sum(), x, create_graph=True)
        return torch.autograd.grad(d2.sum(), x)[0]

    torch.testing.assert_close(third(lambda a: opforge_torch.swish(a, 0.5)),
                               third(lambda a: _composed_swish(a, 0.5)), rtol=1e-10, atol=1e-12)


# against float64 on the unrounded inputs, atol relative to the largest entry (the terms cancel):
# float32 at RMSNorm's float32 rtol (the worst of 20 seeds: 3e-7); bfloat16 rounds the inputs to 8
# bits before two ops and two derivatives (the worst of 20 seeds: 1.0e-2)
@pytest.mark.parametrize("dtype,rtol", [(torch.float32, spec.RMS_NORM.tolerance("float32")[0]),
                                        (torch.bfloat16, 5e-2)])
def test_low_precision_second_derivatives_follow_the_float64_reference(dtype, rtol):
    x64, w64 = _inputs((3, 16), seed=4)
    torch.manual_seed(14)
    v64 = (torch.randn_like(x64), torch.randn_like(w64))
    expected = _second_derivatives(lambda a, b: _composed_rms_norm(_composed_swish(a, 1.0), b, 1e-5),
                                   (x64, w64), v64)
    x = x64.detach().to(dtype).requires_grad_()
    w = w64.detach().to(dtype).requires_grad_()
    got = _second_derivatives(
        lambda a, b: opforge_torch.rms_norm(opforge_torch.swish(a, 1.0), b, 1e-5), (x, w),
        tuple(t.to(dtype) for t in v64))
    for g, e in zip(got, expected):
        assert g.dtype == dtype
        torch.testing.assert_close(g.double(), e, rtol=rtol, atol=rtol * e.abs().max().item())


def test_zero_row_with_zero_epsilon_gives_zero_not_nan():
    """The kernels define a row of zeros with epsilon 0 as output 0; its derivatives stay 0."""
    x = torch.zeros(2, 4, dtype=torch.float64)
    x[1] = torch.tensor([1.0, -2.0, 0.5, 3.0])
    x.requires_grad_()
    w = torch.ones(4, dtype=torch.float64, requires_grad=True)
    (gx,) = torch.autograd.grad(opforge_torch.rms_norm(x, w, 0.0).pow(2).sum() + x.sum(), x,
                                create_graph=True)
    second = torch.autograd.grad(gx.pow(2).sum(), (x, w))
    assert all(torch.isfinite(t).all() for t in second)
    assert torch.equal(second[0][0], torch.zeros(4, dtype=torch.float64))
