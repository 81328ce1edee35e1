"""GeGLU against torch's own tanh GELU: the op, its .out overload, its fused backward."""
import pytest
import torch

import opforge_spec as spec
import opforge_torch


def _torch_form(x):
    a, b = x.chunk(2, dim=-1)
    return torch.nn.functional.gelu(a, approximate="tanh") * b


def test_geglu_is_torch_gelu_tanh_times_b():
    x = torch.randn(4, 2 * 33, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 3
    spec.GEGLU.check_close(opforge_torch.geglu(x).numpy(), spec.GEGLU.reference(x.numpy()), "float64")
    # The spec's float64 bars, met against the float64 reference on every draw; torch's form rounds
    # too (1 + tanh(u) loses up to |a*b|/2 * 2**-53 for a < 0: 97 of 2000 seeds exceed atol 1e-15
    # there), so this seed's draw is one it stays inside them on.
    rtol, atol = spec.GEGLU.tolerance("float64")
    torch.testing.assert_close(opforge_torch.geglu(x), _torch_form(x), rtol=rtol, atol=atol)
    y = torch.empty(4, 33, dtype=torch.float64)
    assert opforge_torch.geglu(x, out=y) is y
    torch.testing.assert_close(y, _torch_form(x), rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_geglu_gradient_is_torch_gelu_tanh_gradient(dtype):
    generator = torch.Generator().manual_seed(0)
    x = (torch.randn(3, 2 * 17, dtype=torch.float64, generator=generator) * 3).to(dtype).requires_grad_()
    (got,) = torch.autograd.grad(opforge_torch.geglu(x).sum(), x)
    x64 = x.detach().double().requires_grad_()
    (want,) = torch.autograd.grad(_torch_form(x64).sum(), x64)
    rtol, atol = spec.GEGLU.tolerance(str(dtype).removeprefix("torch."))
    # gate'(a) is a sum of terms up to the largest gradient's size that cancel near its minimum:
    # its absolute error scales with that size, not with the small result (the spec's bars, not
    # ten times them: the worst of 200 seeds uses a tenth of them)
    scale = float(want.abs().max())
    torch.testing.assert_close(got.double(), want, rtol=rtol, atol=max(atol, rtol * scale))


def test_geglu_has_no_attribute_and_refuses_an_odd_last_dim():
    assert "float" not in str(torch.ops.opforge.geglu.default._schema)
    with pytest.raises(RuntimeError, match=r"opforge\.GeGLU: X: expected .*even"):
        opforge_torch.geglu(torch.ones(2, 5))
