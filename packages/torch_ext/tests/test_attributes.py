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

BAD = [("Swish", "beta", v) for v in (1e39, -1e39, spec.FLOAT32_OVERFLOW, -spec.FLOAT32_OVERFLOW,
                                      float("inf"), float("-inf"), float("nan"))] + \
      [("RMSNorm", "epsilon", v) for v in (1e300, spec.FLOAT32_OVERFLOW, float("inf"),
                                           float("nan"), -1e-6, -1e300)]
BAD_IDS = [f"{op}-{name}={value!r}" for op, name, value in BAD]


class _Call(torch.nn.Module):
    def __init__(self, op, value):
        super().__init__()
        self.op, self.value = op, value
        self.weight = torch.nn.Parameter(torch.ones(8))

    def forward(self, x):
        if self.op == "Swish":
            return opforge_torch.swish(x, self.value)
        return opforge_torch.rms_norm(x, self.weight, self.value)


def _expected(op, name, value):
    message = spec.OPS[op].attributes[name].error(op, value)
    assert message is not None, "the spec accepts this value: the test list is wrong"
    return message


@pytest.mark.parametrize("op,name,value", BAD, ids=BAD_IDS)
def test_eager_refuses_with_the_spec_message(op, name, value):
    with pytest.raises(RuntimeError) as info:
        _Call(op, value)(torch.randn(2, 8))
    assert str(info.value).split("\n")[0] == _expected(op, name, value)


@pytest.mark.parametrize("op,name,value", BAD, ids=BAD_IDS)
def test_torch_compile_and_export_refuse_with_the_spec_message(op, name, value):
    torch._dynamo.reset()
    model, x = _Call(op, value), torch.randn(2, 8)
    with pytest.raises(RuntimeError) as compiled:
        torch.compile(model, fullgraph=True, backend="eager")(x)
    assert _expected(op, name, value) in str(compiled.value)
    with pytest.raises(RuntimeError) as exported:
        torch.export.export(model, (x,))
    assert _expected(op, name, value) in str(exported.value)


@pytest.mark.parametrize("dynamo,opset", [(True, 18), (False, 17)], ids=["dynamo", "torchscript"])
@pytest.mark.parametrize("decomposed", [False, True], ids=["opforge", "decomposed"])
@pytest.mark.parametrize("op,name,value", [("Swish", "beta", 1e39), ("RMSNorm", "epsilon", 1e300)],
                         ids=["beta-1e39", "epsilon-1e300"])
def test_onnx_export_refuses_with_the_spec_message(tmp_path, op, name, value, decomposed, dynamo,
                                                    opset):
    with pytest.raises(Exception) as info:
        opforge_onnx.export(_Call(op, value), (torch.randn(2, 8),), str(tmp_path / "m.onnx"),
                            decomposed=decomposed, dynamo=dynamo, opset_version=opset)
    assert _expected(op, name, value) in str(info.value)
    assert not (tmp_path / "m.onnx").exists()


@pytest.mark.parametrize("decomposed", [False, True], ids=["opforge", "decomposed"])
def test_translation_table_refuses_before_building_a_node(decomposed):
    """The table is public (custom exporters use it): its functions check the attribute first,
    so no graph input is needed to see the refusal."""
    table = opforge_onnx.custom_translation_table(decomposed=decomposed)
    with pytest.raises(RuntimeError) as info:
        table[torch.ops.opforge.swish.default](None, beta=1e39)
    assert str(info.value) == _expected("Swish", "beta", 1e39)
    with pytest.raises(RuntimeError) as info:
        table[torch.ops.opforge.rms_norm.default](None, None, epsilon=1e300)
    assert str(info.value) == _expected("RMSNorm", "epsilon", 1e300)


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
    torch.testing.assert_close(got.double(), expected, rtol=1e-6, atol=1e-45)
    assert torch.isfinite(got).all() and (got[0] != 0).all()
