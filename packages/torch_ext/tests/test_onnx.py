"""ONNX export: one opforge node per call (both exporters), or standard ops when decomposed."""

import warnings

import numpy as np
import onnx
import pytest
import torch

import opforge_spec as spec
import opforge_torch
import opforge_torch.onnx as opforge_onnx

STANDARD_OPS = {"Mul", "Sigmoid", "Pow", "ReduceMean", "Add", "Sqrt", "Div", "Max", "Constant",
                "CastLike", "Cast"}


class TwiceEach(torch.nn.Module):
    """Calls each op twice, so one node per call means exactly two of each."""

    def __init__(self, dim=8):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.rand(dim, generator=torch.Generator().manual_seed(0)) + 0.5)

    def forward(self, x):
        x = opforge_torch.rms_norm(opforge_torch.swish(x, 1.5), self.weight, 1e-5)
        return opforge_torch.rms_norm(opforge_torch.swish(x, 0.5), self.weight, 0.0)


EXPORTS = [(True, 18), (True, 21), (False, 13), (False, 17)]
IDS = [f"{'dynamo' if d else 'torchscript'}-opset{o}" for d, o in EXPORTS]


def _export(tmp_path, dynamo, opset, decomposed):
    model, x = TwiceEach(), torch.randn(2, 3, 8, generator=torch.Generator().manual_seed(1))
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
    bigger = torch.randn(3, 5, 8, generator=torch.Generator().manual_seed(2))
    bigger[1, 2] = 0.0
    for inp in (x, bigger):
        (got,) = session.run(None, {"x": inp.numpy()})
        # the spec's float32 bars of RMSNorm, the looser of the model's two ops
        np.testing.assert_allclose(got, model(inp).detach().numpy(), *spec.RMS_NORM.tolerance("float32"))


def test_plain_torch_onnx_export_with_translation_table(tmp_path):
    path = str(tmp_path / "plain.onnx")
    x = torch.randn(2, 8, generator=torch.Generator().manual_seed(5))
    torch.onnx.export(TwiceEach(), (x,), path, dynamo=True,
                      custom_translation_table=opforge_onnx.custom_translation_table())
    proto = onnx.load(path)
    assert sum(n.domain == "opforge" for n in proto.graph.node) == 4
    assert _imports(proto)["opforge"] == 1


def test_dynamo_refuses_old_opsets(tmp_path):
    with pytest.raises(ValueError, match="dynamo=False"):
        opforge_onnx.export(TwiceEach(), (torch.zeros(2, 8),), str(tmp_path / "m.onnx"),
                            dynamo=True, opset_version=17)


# ---- output types and shapes: the spec's shape rule, through both exporters -------------------

SHAPE_EXPORTS = [(False, 13), (False, 17), (True, 18)]
DOWNSTREAM = 7  # a Linear after the op: its output's last dim


class ThenLinear(torch.nn.Module):
    """One op of the spec, then a Linear on its first output: (Y[, H], Linear(Y))."""

    def __init__(self, op, y_last):
        super().__init__()
        self.op = getattr(torch.ops.opforge, op.torch_name)
        torch.manual_seed(0)  # the Linear's initial weights
        self.linear = torch.nn.Linear(y_last, DOWNSTREAM)

    def forward(self, *inputs):
        outputs = self.op(*inputs)
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        return (*outputs, self.linear(outputs[0].to(torch.float32)))  # (a quantized Q cast back)


def _spec_inputs(op, x_shape):
    """The op's inputs for X of `x_shape`: W is a per-column weight, any other input has X's shape."""
    gen = torch.Generator().manual_seed(0)
    return tuple(torch.rand(x_shape[-1], generator=gen) + 0.5 if name == "W"
                 else torch.randn(x_shape, generator=gen) for name in op.inputs)


def _dynamic_leading_axes(names, dynamo):
    """Batch and sequence axes of every input but the weight W, dynamic: the exporter's keyword."""
    if not dynamo:
        return {"dynamic_axes": {n: {0: "batch", 1: "seq"} for n in names if n != "W"}}
    axes = {0: torch.export.Dim("batch"), 1: torch.export.Dim("seq")}
    return {"dynamic_shapes": (tuple(None if n == "W" else axes for n in names),)}  # forward(*inputs)


def _dims(value):
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("dynamo,opset", SHAPE_EXPORTS,
                         ids=[f"{'dynamo' if d else 'torchscript'}-opset{o}" for d, o in SHAPE_EXPORTS])
@pytest.mark.parametrize("op", list(spec.OPS.values()), ids=lambda op: op.name)
def test_outputs_carry_the_spec_shape_rule_downstream(tmp_path, capfd, op, dynamo, opset, dynamic):
    """Y's dims are the spec's output shape (X's dim symbols on dynamic axes), and so are the dims
    after it; the exporter says nothing about missing shape inference."""
    x_shape = (2, 3, 4 * op.split)
    y_last = op.output_shape(x_shape)[-1]
    names = list(op.inputs)
    path = str(tmp_path / "model.onnx")
    capfd.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        opforge_onnx.export(ThenLinear(op, y_last), _spec_inputs(op, x_shape), path, dynamo=dynamo,
                            opset_version=opset, input_names=names, output_names=[*op.outputs, "Z"],
                            **(_dynamic_leading_axes(names, dynamo) if dynamic else {}))
    said = capfd.readouterr().err + "\n".join(str(w.message) for w in caught)
    proto = onnx.load(path)
    nodes = [n for n in proto.graph.node if n.domain == "opforge"]
    assert [(n.op_type, len(n.output)) for n in nodes] == [(op.name, len(op.outputs))]
    assert not {"Slice", "Shape"} & {n.op_type for n in proto.graph.node}, proto.graph.node
    x_dims = _dims(proto.graph.input[0])
    leading = x_dims[:2] if dynamic else list(x_shape[:2])
    assert all(isinstance(d, str) for d in leading) == dynamic, x_dims
    *outputs, z = proto.graph.output
    # each output by its rule (Y by the op's, H X's shape, a row output X's with the last dim 1):
    # X's leading dims; X's dtype or the output's own
    expected = [[*leading, op.output_shape_of(name, x_shape)[-1]] for name in op.outputs]
    assert [_dims(o) for o in outputs] == expected, ([o.name for o in outputs], x_dims)
    assert _dims(z) == [*leading, DOWNSTREAM], (z.name, _dims(z), x_dims)
    x_type = proto.graph.input[0].type.tensor_type.elem_type
    assert [o.type.tensor_type.elem_type for o in outputs] == [
        spec.DTYPE_CODES[op.output_dtype(name, "float32")] if name in op.output_dtypes else x_type
        for name in op.outputs]
    assert "shape inference of" not in said, said


# ---- an op with a residual input and a second output: one node, two outputs -------------------
class ResidualStream(torch.nn.Module):
    """Two decoder steps on a residual stream: the H of the first AddRMSNorm is the second's R."""

    def __init__(self, dim=8):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.rand(dim, generator=torch.Generator().manual_seed(0)) + 0.5)

    def forward(self, x, residual):
        y, h = opforge_torch.add_rms_norm(x, residual, self.weight, 1e-5)
        return opforge_torch.add_rms_norm(opforge_torch.swish(y, 1.0), h, self.weight, 0.0)


def _export_stream(tmp_path, dynamo, opset, decomposed):
    gen = torch.Generator().manual_seed(3)
    model, x, r = ResidualStream(), torch.randn(2, 3, 8, generator=gen), torch.randn(2, 3, 8, generator=gen)
    path = str(tmp_path / "stream.onnx")
    axes = {0: "batch", 1: "seq"}
    opforge_onnx.export(model, (x, r), path, decomposed=decomposed, dynamo=dynamo, opset_version=opset,
                        input_names=["x", "r"], output_names=["y", "h"],
                        dynamic_axes={n: axes for n in ("x", "r", "y", "h")})
    proto = onnx.load(path)
    onnx.checker.check_model(proto)
    return model, path, proto


@pytest.mark.parametrize("dynamo,opset", EXPORTS, ids=IDS)
def test_a_two_output_op_is_one_node_with_both_outputs_used(tmp_path, dynamo, opset):
    _, _, proto = _export_stream(tmp_path, dynamo, opset, decomposed=False)
    nodes = [n for n in proto.graph.node if n.domain == "opforge" and n.op_type == "AddRMSNorm"]
    assert [(len(n.input), len(n.output)) for n in nodes] == [(3, 2), (3, 2)]
    first, second = nodes
    assert first.output[1] in second.input  # the first H is the second residual
    assert [(a.name, a.f) for a in first.attribute] == [("epsilon", np.float32(1e-5))]
    for value in (*proto.graph.input, *proto.graph.output):
        dims = value.type.tensor_type.shape.dim
        assert all(d.dim_param for d in dims[:2]) and dims[2].dim_value == 8, (value.name, dims)


@pytest.mark.parametrize("dynamo,opset", EXPORTS, ids=IDS)
def test_a_two_output_op_decomposed_is_standard_onnx_and_matches(tmp_path, dynamo, opset):
    import onnxruntime

    model, path, proto = _export_stream(tmp_path, dynamo, opset, decomposed=True)
    assert {n.domain for n in proto.graph.node} == {""}
    assert {n.op_type for n in proto.graph.node} <= STANDARD_OPS
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    gen = torch.Generator().manual_seed(4)
    x, r = torch.randn(3, 5, 8, generator=gen), torch.randn(3, 5, 8, generator=gen)
    r[1, 2] = -x[1, 2]  # a row of H that is exactly zero, with epsilon 0 in the second step
    got = session.run(None, {"x": x.numpy(), "r": r.numpy()})
    with torch.no_grad():
        expected = model(x, r)
    for name, g, e in zip(("Y", "H"), got, expected):
        np.testing.assert_allclose(g, e.numpy(), *spec.ADD_RMS_NORM.tolerance("float32"), err_msg=name)


def test_reuse_torchlib_registry_builds_torchlibs_op_list_once_per_process():
    from torch.onnx._internal.exporter import _registration

    assert opforge_onnx.reuse_torchlib_registry() is True
    apis = _registration.onnxscript_apis
    assert apis.get_torchlib_ops() is apis.get_torchlib_ops()
