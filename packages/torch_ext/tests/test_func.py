"""torch.func over every op: grad, vjp and jacrev (first and second order, under vmap too) give
autograd's numbers; forward mode (jvp, jacfwd) is refused with one line naming the op."""

import pytest
import torch

import opforge_spec as spec
import opforge_torch  # noqa: F401  (registers the ops)

_GEN = torch.Generator().manual_seed(0)
_X = torch.randn(2, 6, generator=_GEN, dtype=torch.float64)
_W = torch.rand(6, generator=_GEN, dtype=torch.float64) + 0.5
_R = torch.randn(2, 6, generator=_GEN, dtype=torch.float64)
CASES = {  # op -> (its function of the tensor inputs, the inputs)
    "Swish": (lambda x: torch.ops.opforge.swish(x, 1.3), (_X,)),
    "RMSNorm": (lambda x, w: torch.ops.opforge.rms_norm(x, w, 1e-5), (_X, _W)),
    "SwiGLU": (lambda x: torch.ops.opforge.swiglu(x, 1.3), (_X,)),
    "GeGLU": (torch.ops.opforge.geglu.default, (_X,)),
    "AddRMSNorm": (lambda x, r, w: torch.ops.opforge.add_rms_norm(x, r, w, 1e-5), (_X, _R, _W)),
    "Swish, default beta": (torch.ops.opforge.swish.default, (_X,)),
}


def _argnums(inputs):
    return tuple(range(len(inputs)))


def _outputs(result) -> tuple:
    return result if isinstance(result, tuple) else (result,)


def _weighted_sum(fn, cotangent):
    """sum over the outputs of <output, its cotangent>: a scalar using every output."""
    return lambda *inputs: sum((o * c).sum() for o, c in zip(_outputs(fn(*inputs)), _outputs(cotangent)))


def _cotangent(fn, inputs):
    """One random cotangent per output (a tuple for an op with several outputs)."""
    gen = torch.Generator().manual_seed(1)
    outputs = fn(*inputs)
    cotangents = tuple(torch.randn(o.shape, generator=gen, dtype=torch.float64) for o in _outputs(outputs))
    return cotangents if isinstance(outputs, tuple) else cotangents[0]


def _autograd_grads(fn, inputs, cotangent):
    leaves = [t.clone().requires_grad_() for t in inputs]
    return torch.autograd.grad(fn(*leaves), leaves, cotangent)


@pytest.mark.parametrize("op", CASES)
def test_grad_gives_autograds_numbers(op):
    fn, inputs = CASES[op]
    cotangent = _cotangent(fn, inputs)
    got = torch.func.grad(_weighted_sum(fn, cotangent), argnums=_argnums(inputs))(*inputs)
    torch.testing.assert_close(got, _autograd_grads(fn, inputs, cotangent))


@pytest.mark.parametrize("op", CASES)
def test_vjp_gives_autograds_numbers(op):
    fn, inputs = CASES[op]
    cotangent = _cotangent(fn, inputs)
    output, vjp_fn = torch.func.vjp(fn, *inputs)
    torch.testing.assert_close(output, fn(*inputs), rtol=0, atol=0)
    torch.testing.assert_close(vjp_fn(cotangent), _autograd_grads(fn, inputs, cotangent))


@pytest.mark.parametrize("op", CASES)
def test_jacrev_gives_autograds_jacobian(op):
    fn, inputs = CASES[op]
    got = torch.func.jacrev(fn, argnums=_argnums(inputs))(*inputs)
    torch.testing.assert_close(got, torch.autograd.functional.jacobian(fn, inputs))


@pytest.mark.parametrize("op", CASES)
def test_jacrev_of_jacrev_gives_autograds_hessian(op):
    """Second order: the backward ops under the transforms."""
    fn, inputs = CASES[op]
    scalar = _weighted_sum(fn, _cotangent(fn, inputs))
    argnums = _argnums(inputs)
    got = torch.func.jacrev(torch.func.jacrev(scalar, argnums=argnums), argnums=argnums)(*inputs)
    torch.testing.assert_close(got, torch.autograd.functional.hessian(scalar, inputs))


def test_vmap_of_grad_gives_per_sample_gradients_through_both_outputs():
    fn, (x, r, w) = CASES["AddRMSNorm"]

    def loss(row, residual, weight):
        y, h = fn(row, residual, weight)
        return y.pow(2).sum() + (h * y).sum()

    got = torch.func.vmap(torch.func.grad(loss, argnums=(0, 1, 2)), in_dims=(0, 0, None))(x, r, w)
    rows = [_autograd_grads(loss, (row, res, w), torch.tensor(1.0, dtype=torch.float64))
            for row, res in zip(x, r)]
    torch.testing.assert_close(got, tuple(torch.stack(g) for g in zip(*rows)))


def test_grad_of_one_output_alone():
    """The output not used gets no gradient from torch.func; its zeros are the backward's."""
    fn, inputs = CASES["AddRMSNorm"]
    for index in (0, 1):
        def one(*tensors, index=index):  # this iteration's index, bound now
            return fn(*tensors)[index].pow(2).sum()

        got = torch.func.grad(one, argnums=(0, 1, 2))(*inputs)
        torch.testing.assert_close(got, _autograd_grads(one, inputs, torch.tensor(1.0, dtype=torch.float64)))


def test_vmap_of_grad_gives_per_sample_gradients():
    fn, (x, w) = CASES["RMSNorm"]

    def loss(row, weight):
        return fn(row, weight).pow(2).sum()

    got = torch.func.vmap(torch.func.grad(loss, argnums=(0, 1)), in_dims=(0, None))(x, w)
    rows = [_autograd_grads(loss, (row, w), torch.tensor(1.0, dtype=torch.float64)) for row in x]
    torch.testing.assert_close(got, tuple(torch.stack(g) for g in zip(*rows)))


@pytest.mark.parametrize("op", [name for name, op in spec.OPS.items() if op.has_gradient])
def test_forward_mode_is_refused_naming_the_op(op):
    fn, inputs = CASES[op]
    message = spec.error(op, "derivative", "reverse mode (backward, torch.func.grad, vjp or jacrev)",
                         "forward mode (jvp, jacfwd or forward_ad)")
    with pytest.raises(RuntimeError) as info:
        torch.func.jvp(fn, inputs, tuple(torch.ones_like(t) for t in inputs))
    assert str(info.value).splitlines()[0] == message


_ROLES = {"X": _X, "R": _R, "W": _W}


@pytest.mark.parametrize("op", [op for op in spec.OPS.values() if not op.has_gradient], ids=lambda op: op.name)
def test_an_op_without_gradient_refuses_reverse_and_forward_mode_naming_the_op(op):
    """grad and jvp through its float outputs (RMSNormQuant's Scale) are refused in one line."""
    inputs = tuple(_ROLES[n] for n in op.inputs)

    def fn(*tensors):
        outputs = _outputs(getattr(torch.ops.opforge, op.torch_name)(*tensors))
        return sum(o.sum() for o in outputs if o.dtype == torch.float32)

    for transform in (lambda: torch.func.grad(fn)(*inputs),
                      lambda: torch.func.jvp(fn, inputs, tuple(torch.ones_like(t) for t in inputs))):
        with pytest.raises(RuntimeError) as info:
            transform()
        assert str(info.value).splitlines()[0].startswith(f"opforge.{op.name} has no gradient: ")
