"""ONNX export of mixed-dtype calls (a float32 W beside a bfloat16 X, issue 31, Build 2), through
both exporters: the opforge node (W typed by its own constraint, TW), the decomposed form and the
standard RMSNormalization (both computed in float32 with W as given, X upcast, the outputs of X's
dtype cast back) valid and computing what the op computes (onnx's reference evaluator)."""

import ml_dtypes
import numpy as np
import onnx
import pytest
import torch
from onnx.reference import ReferenceEvaluator

import opforge_spec as spec
import opforge_torch
import opforge_torch.onnx as opforge_onnx
from opforge_torch import export_table

BF16, FLOAT, INT8 = onnx.TensorProto.BFLOAT16, onnx.TensorProto.FLOAT, onnx.TensorProto.INT8
EPS = 1e-5
ORT_NEWEST = max(export_table.table()["runtimes"]["onnxruntime"], key=export_table._version_key)


class Mixed(torch.nn.Module):
    """Every op with a weight, W float32 (Gemma's 1 + w), X and R bfloat16."""

    def __init__(self, dim=16):
        super().__init__()
        gen = torch.Generator().manual_seed(0)
        self.weight = torch.nn.Parameter(1.0 + 0.3 * torch.randn(dim, generator=gen))

    def forward(self, x, r):
        y, h = opforge_torch.add_rms_norm(x, r, self.weight, EPS)
        q, scale = opforge_torch.rms_norm_quant(h, self.weight, EPS)
        return opforge_torch.rms_norm(y, self.weight, EPS), h, q, scale


class AddNorm(Mixed):
    """AddRMSNorm alone: the op the export table writes as the standard op (Add, RMSNormalization)."""

    def forward(self, x, r):
        return opforge_torch.add_rms_norm(x, r, self.weight, EPS)


def _inputs(seed=1, shape=(2, 3, 16)):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=gen).bfloat16(), torch.randn(shape, generator=gen).bfloat16()


def _export(tmp_path, dynamo, opset, decomposed):
    path = str(tmp_path / "mixed.onnx")
    opforge_onnx.export(Mixed(), _inputs(), path, dynamo=dynamo, decomposed=decomposed, opset_version=opset,
                        input_names=["x", "r"], output_names=["y", "h", "q", "scale"])
    proto = onnx.load(path)
    opforge_onnx.register_onnx_schemas()  # the opforge nodes' types are checked against them too
    onnx.checker.check_model(proto)
    onnx.shape_inference.infer_shapes(proto, check_type=True, strict_mode=True)
    return proto


def _output_types(proto):
    return [o.type.tensor_type.elem_type for o in proto.graph.output]


def _run(proto, x, r):
    feeds = {"x": x.float().numpy().astype(ml_dtypes.bfloat16), "r": r.float().numpy().astype(ml_dtypes.bfloat16)}
    return [np.asarray(o).astype(np.float64) for o in ReferenceEvaluator(proto).run(None, feeds)]


def _assert_computes_the_op(proto, model=None):
    """Y within one bfloat16 ulp of the op's and equal in all but a few (two float32 formulas
    rounding to neighbours; W rounded to bfloat16 would move about a quarter), H equal, Q within
    one step, Scale within float32 rounding."""
    x, r = _inputs(seed=2, shape=(8, 5, 16))
    got = _run(proto, x, r)
    with torch.no_grad():
        want = [t.double().numpy() for t in (model or Mixed())(x, r)]
    y, y_want = got[0], want[0]
    assert np.all(np.abs(y - y_want) <= np.abs(y_want) * 2.0**-7)
    assert np.mean(y != y_want) <= 0.02
    np.testing.assert_array_equal(got[1], want[1])
    if len(want) > 2:
        assert np.abs(got[2] - want[2]).max() <= 1
        np.testing.assert_allclose(got[3], want[3], rtol=1e-6)


EXPORTS = [(True, 18), (False, 17)]
IDS = ["dynamo-18", "torchscript-17"]


@pytest.mark.parametrize("dynamo,opset", EXPORTS, ids=IDS)
def test_opforge_nodes_take_a_float32_w(tmp_path, dynamo, opset):
    proto = _export(tmp_path, dynamo, opset, decomposed=False)
    nodes = [n for n in proto.graph.node if n.domain == "opforge"]
    assert sorted(n.op_type for n in nodes) == ["AddRMSNorm", "RMSNorm", "RMSNormQuant"]
    weights = {i.name: i.data_type for i in proto.graph.initializer}
    assert {weights[n.input[-1]] for n in nodes} == {FLOAT}
    assert _output_types(proto) == [BF16, BF16, INT8, FLOAT]


def test_the_schemas_give_w_its_own_type_constraint():
    opforge_onnx.register_onnx_schemas()
    for name in ("RMSNorm", "AddRMSNorm", "RMSNormQuant"):
        schema = onnx.defs.get_schema(name, 1, "opforge")
        types = {p.name: p.type_str for p in schema.inputs}
        assert types["X"] == "T" and types["W"] == "TW", name


@pytest.mark.parametrize("dynamo,opset", EXPORTS, ids=IDS)
def test_decomposed_form_computes_in_float32_with_w_as_given(tmp_path, dynamo, opset):
    proto = _export(tmp_path, dynamo, opset, decomposed=True)
    assert {n.domain for n in proto.graph.node} == {""}
    assert _output_types(proto) == [BF16, BF16, INT8, FLOAT]
    _assert_computes_the_op(proto)


def test_standard_rms_normalization_computes_in_float32_with_w_as_given(tmp_path):
    plan = opforge_onnx.export_plan("onnxruntime", ORT_NEWEST, 23)
    if plan.form("AddRMSNorm") != "standard":
        pytest.skip(f"the table names no standard RMSNormalization here:\n{plan}")
    path, model = str(tmp_path / "auto.onnx"), AddNorm()
    opforge_onnx.export(model, _inputs(), path, decomposed="auto", runtime="onnxruntime",
                        runtime_version=ORT_NEWEST, opset_version=23, input_names=["x", "r"],
                        output_names=["y", "h"])
    proto = onnx.load(path)
    onnx.checker.check_model(proto)
    onnx.shape_inference.infer_shapes(proto, check_type=True, strict_mode=True)
    inferred = onnx.shape_inference.infer_shapes(proto)
    types = {v.name: v.type.tensor_type.elem_type for v in (*inferred.graph.value_info, *inferred.graph.input)}
    types.update({i.name: i.data_type for i in proto.graph.initializer})
    norms = [n for n in proto.graph.node if n.op_type == "RMSNormalization"]
    assert norms and all(types[n.input[0]] == FLOAT and types[n.input[1]] == FLOAT for n in norms)
    assert _output_types(proto) == [BF16, BF16]
    _assert_computes_the_op(proto, model)


class OneOp(torch.nn.Module):
    """One op of the spec with a weight, W float32, X (and R) bfloat16."""

    def __init__(self, op, dim=16):
        super().__init__()
        self.op = op
        self.weight = Mixed(dim).weight

    def forward(self, x, r):
        tensors = {"X": x, "R": r, "W": self.weight}
        return getattr(opforge_torch, self.op.torch_name)(*(tensors[n] for n in self.op.inputs), EPS)


@pytest.mark.parametrize("dynamo,opset", EXPORTS, ids=IDS)
@pytest.mark.parametrize("op", [o for o in spec.OPS.values() if "W" in o.inputs], ids=lambda o: o.name)
def test_every_op_with_a_weight_decomposes_a_mixed_call(tmp_path, op, dynamo, opset):
    """Each output as the op gives it: of X's dtype within one bfloat16 ulp (H equal), a quantized
    one within one step, Scale within float32 rounding."""
    path, model = str(tmp_path / "one.onnx"), OneOp(op)
    opforge_onnx.export(model, _inputs(), path, dynamo=dynamo, decomposed=True, opset_version=opset,
                        input_names=["x", "r"], output_names=list(op.outputs))
    proto = onnx.load(path)
    onnx.checker.check_model(proto)
    onnx.shape_inference.infer_shapes(proto, check_type=True, strict_mode=True)
    x, r = _inputs(seed=3, shape=(8, 5, 16))
    with torch.no_grad():
        result = model(x, r)
    want = [t.double().numpy() for t in (result if isinstance(result, tuple) else (result,))]
    for name, got, expected in zip(op.outputs, _run(proto, x, r), want):
        if name in op.output_dtypes and op.output_dtypes[name] in op.attributes:  # Q
            assert np.abs(got - expected).max() <= 1, name
        elif name in op.output_dtypes:  # Scale
            np.testing.assert_allclose(got, expected, rtol=1e-6, err_msg=name)
        else:
            assert np.all(np.abs(got - expected) <= np.abs(expected) * 2.0**-7), name
