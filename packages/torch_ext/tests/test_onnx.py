"""ONNX export: one opforge node per call (both exporters), or standard ops when decomposed."""

import numpy as np
import onnx
import pytest
import torch

import opforge_torch
import opforge_torch.onnx as opforge_onnx

STANDARD_OPS = {"Mul", "Sigmoid", "Pow", "ReduceMean", "Add", "Sqrt", "Div", "Max", "Constant",
                "CastLike", "Cast"}


class TwiceEach(torch.nn.Module):
    """Calls each op twice, so one node per call means exactly two of each."""

    def __init__(self, dim=8):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.rand(dim) + 0.5)

    def forward(self, x):
        x = opforge_torch.rms_norm(opforge_torch.swish(x, 1.5), self.weight, 1e-5)
        return opforge_torch.rms_norm(opforge_torch.swish(x, 0.5), self.weight, 0.0)


EXPORTS = [(True, 18), (True, 21), (False, 13), (False, 17)]
IDS = [f"{'dynamo' if d else 'torchscript'}-opset{o}" for d, o in EXPORTS]


def _export(tmp_path, dynamo, opset, decomposed):
    model, x = TwiceEach(), torch.randn(2, 3, 8)
    x[0, 1] = 0.0  # a zero row with epsilon 0 in the second RMSNorm
    path = str(tmp_path / "model.onnx")
    opforge_onnx.export(model, (x,), path, decomposed=decomposed, dynamo=dynamo,
                        opset_version=opset, input_names=["x"], output_names=["y"],
                        dynamic_axes={"x": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}})
    proto = onnx.load(path)
    onnx.checker.check_model(proto)
    return model, x, path, proto


def _imports(proto):
    return {o.domain: o.version for o in proto.opset_import}


def _assert_dynamic(proto):
    for value in (proto.graph.input[0], proto.graph.output[0]):
        dims = value.type.tensor_type.shape.dim
        assert all(d.dim_param for d in dims[:2]), f"{value.name}: {dims}"
        assert dims[2].dim_value == 8


@pytest.mark.parametrize("dynamo,opset", EXPORTS, ids=IDS)
def test_one_opforge_node_per_call(tmp_path, dynamo, opset):
    _, _, _, proto = _export(tmp_path, dynamo, opset, decomposed=False)
    nodes = [(n.domain, n.op_type) for n in proto.graph.node if n.domain == "opforge"]
    assert sorted(nodes) == [("opforge", "RMSNorm")] * 2 + [("opforge", "Swish")] * 2
    assert _imports(proto)["opforge"] == 1 and _imports(proto)[""] == opset
    attrs = {(n.op_type, a.name): a.f for n in proto.graph.node if n.domain == "opforge"
             for a in n.attribute}
    assert set(attrs) == {("Swish", "beta"), ("RMSNorm", "epsilon")}
    _assert_dynamic(proto)


@pytest.mark.parametrize("dynamo,opset", EXPORTS, ids=IDS)
def test_decomposed_is_standard_onnx_and_matches(tmp_path, dynamo, opset):
    import onnxruntime

    model, x, path, proto = _export(tmp_path, dynamo, opset, decomposed=True)
    assert {n.domain for n in proto.graph.node} == {""}
    assert {n.op_type for n in proto.graph.node} <= STANDARD_OPS
    assert "opforge" not in _imports(proto) and _imports(proto)[""] == opset
    _assert_dynamic(proto)
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    bigger = torch.randn(3, 5, 8)
    bigger[1, 2] = 0.0
    for inp in (x, bigger):
        (got,) = session.run(None, {"x": inp.numpy()})
        np.testing.assert_allclose(got, model(inp).detach().numpy(), rtol=1e-4, atol=1e-5)


def test_plain_torch_onnx_export_with_translation_table(tmp_path):
    path = str(tmp_path / "plain.onnx")
    torch.onnx.export(TwiceEach(), (torch.randn(2, 8),), path, dynamo=True,
                      custom_translation_table=opforge_onnx.custom_translation_table())
    proto = onnx.load(path)
    assert sum(n.domain == "opforge" for n in proto.graph.node) == 4
    assert _imports(proto)["opforge"] == 1


def test_dynamo_refuses_old_opsets(tmp_path):
    with pytest.raises(ValueError, match="dynamo=False"):
        opforge_onnx.export(TwiceEach(), (torch.randn(2, 8),), str(tmp_path / "m.onnx"),
                            dynamo=True, opset_version=17)
