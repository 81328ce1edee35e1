"""Attributes follow the shared rule: finite once rounded to float32 (epsilon also >= 0).

The checks used to run on the double while the kernels compute with the float: beta=1e39 (inf
as float32) gave a step function instead of an error, epsilon=1e300 gave rows of zeros. Every
path to the kernels (eager C++, fake kernels under torch.compile/torch.export, both ONNX
exporters) now refuses such a value with opforge_spec's message.
"""

import numpy as np
import pytest
import torch

import opforge_spec as spec
import opforge_torch
import opforge_torch.onnx as opforge_onnx

FLT_MAX = float(np.finfo(np.float32).max)
# The largest double that still rounds to a finite float32 (to FLT_MAX).
LAST_FINITE = float(np.nextafter(spec.FLOAT32_OVERFLOW, 0.0))

# Values beyond float32 or of the wrong sign: each attribute of each op gets those its rule refuses.
CANDIDATES = (1e39, -1e39, 1e300, -1e300, spec.FLOAT32_OVERFLOW, -spec.FLOAT32_OVERFLOW, float("inf"),
              float("-inf"), float("nan"), -1e-6)
# An int or enum attribute is an int in every schema (torch refuses a float there itself): ints
# out of its range or not among its choices.
INT_CANDIDATES = (5, -1, 2**24 + 1, -(2**24) - 1)
BAD = [(op.name, name, v) for op in spec.OPS.values() for name, attr in op.attributes.items()
       for v in (CANDIDATES if attr.kind == "float" else INT_CANDIDATES) if attr.error(op.name, v) is not None]
BAD_IDS = [f"{op}-{name}={value!r}" for op, name, value in BAD]
FIRST_BAD = {(op, name): value for op, name, value in reversed(BAD)}  # one per attribute


class _Call(torch.nn.Module):
    """A call of `op` with attribute `name` = `value` (the others at their defaults) on X; R is
    a constant of X's shape, W a parameter."""

    def __init__(self, op, name, value):
        super().__init__()
        self.spec, self.attrs = spec.OPS[op], {name: value}
        self.weight = torch.nn.Parameter(torch.ones(8))

    def forward(self, x):
        roles = {"X": x, "R": torch.ones_like(x), "W": self.weight}
        entry = getattr(opforge_torch, self.spec.torch_name)
        return entry(*(roles[n] for n in self.spec.inputs), **self.attrs)


def _x():
    return torch.randn(2, 8, generator=torch.Generator().manual_seed(0))


def _expected(op, name, value):
    message = spec.OPS[op].attributes[name].error(op, value)
    assert message is not None, "the spec accepts this value: the test list is wrong"
    return message


@pytest.mark.parametrize("op,name,value", BAD, ids=BAD_IDS)
def test_eager_refuses_with_the_spec_message(op, name, value):
    with pytest.raises(RuntimeError) as info:
        _Call(op, name, value)(_x())
    assert str(info.value).split("\n")[0] == _expected(op, name, value)


@pytest.mark.parametrize("op,name,value", BAD, ids=BAD_IDS)
def test_torch_compile_and_export_refuse_with_the_spec_message(op, name, value):
    torch._dynamo.reset()
    model, x = _Call(op, name, value), _x()
    with pytest.raises(RuntimeError) as compiled:
        torch.compile(model, fullgraph=True, backend="eager")(x)
    assert _expected(op, name, value) in str(compiled.value)
    with pytest.raises(RuntimeError) as exported:
        torch.export.export(model, (x,))
    assert _expected(op, name, value) in str(exported.value)


@pytest.mark.parametrize("dynamo,opset", [(True, 18), (False, 17)], ids=["dynamo", "torchscript"])
@pytest.mark.parametrize("decomposed", [False, True], ids=["opforge", "decomposed"])
@pytest.mark.parametrize("op,name,value", [(*key, value) for key, value in FIRST_BAD.items()],
                         ids=[f"{op}-{name}={value!r}" for (op, name), value in FIRST_BAD.items()])
def test_onnx_export_refuses_with_the_spec_message(tmp_path, op, name, value, decomposed, dynamo,
                                                    opset):
    with pytest.raises(Exception) as info:
        opforge_onnx.export(_Call(op, name, value), (_x(),), str(tmp_path / "m.onnx"),
                            decomposed=decomposed, dynamo=dynamo, opset_version=opset)
    assert _expected(op, name, value) in str(info.value)
    assert not (tmp_path / "m.onnx").exists()


@pytest.mark.parametrize("op,name,value", [(*key, value) for key, value in FIRST_BAD.items()],
                         ids=[f"{op}-{name}={value!r}" for (op, name), value in FIRST_BAD.items()])
@pytest.mark.parametrize("decomposed", [False, True], ids=["opforge", "decomposed"])
def test_translation_table_refuses_before_building_a_node(decomposed, op, name, value):
    """The table is public (custom exporters use it): its functions check the attribute first,
    so no graph input is needed to see the refusal."""
    table = opforge_onnx.custom_translation_table(decomposed=decomposed)
    translate = table[getattr(torch.ops.opforge, spec.OPS[op].torch_name).default]
    with pytest.raises(RuntimeError) as info:
        translate(*(None for _ in spec.OPS[op].inputs), **{name: value})
    assert str(info.value) == _expected(op, name, value)


@pytest.mark.parametrize("beta", [FLT_MAX, LAST_FINITE, -LAST_FINITE, 1e-45, 0.0])
def test_largest_float32_beta_is_accepted_and_finite(beta):
    x = torch.tensor([-2.0, -0.5, 0.0, 0.5, 2.0], dtype=torch.float64)
    got = opforge_torch.swish(x, beta)
    b32 = float(np.float32(beta))  # the value the kernels compute with
    expected = x * torch.sigmoid(b32 * x)
    torch.testing.assert_close(got, expected)
    torch._dynamo.reset()
    compiled = torch.compile(lambda t: opforge_torch.swish(t, beta), fullgraph=True, backend="eager")
    torch.testing.assert_close(compiled(x), expected)


@pytest.mark.parametrize("epsilon", [FLT_MAX, LAST_FINITE, 0.0])
def test_largest_float32_epsilon_is_accepted_and_finite(epsilon):
    x = torch.tensor([[3.0, 4.0], [0.0, 0.0]])
    got = opforge_torch.rms_norm(x, torch.ones(2), epsilon)
    e32 = float(np.float32(epsilon))
    expected = x.double() / torch.sqrt(x.double().pow(2).mean(-1, keepdim=True) + e32)
    expected = torch.nan_to_num(expected, nan=0.0)  # the row of zeros with epsilon 0 gives 0
    # float32 results down to 3 / sqrt(FLT_MAX) ~ 1e-19: relative only (~17 float32 steps of 2**-24;
    # atol 1e-45 is float32's smallest subnormal)
    torch.testing.assert_close(got.double(), expected, rtol=1e-6, atol=1e-45)
    assert torch.isfinite(got).all() and (got[0] != 0).all()
