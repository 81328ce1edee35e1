"""Every op of the spec reaches every part of opforge_torch: its schemas with a CPU kernel, a fake
kernel and an Autograd kernel, its Python entry point, both ONNX exporters' tables; what it
computes is its composed torch form's value; its spec decomposition, through either exporter, is
standard ONNX only and gives the op's value."""

import numpy as np
import pytest
import torch
from conftest import to_numpy, to_torch

import opforge_spec as spec
import opforge_torch
from opforge_torch import onnx as opforge_onnx

OPS = list(spec.OPS.values())
IDS = [op.name for op in OPS]


def _has_kernel(qualified: str, key: str) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(qualified, key)


@pytest.mark.parametrize("op", OPS, ids=IDS)
def test_every_overload_has_its_kernels(op):
    backward = (f"{op.torch_name}_backward",) if op.has_gradient else ()  # none for an op without a gradient
    for name in (op.torch_name, f"{op.torch_name}.out", *backward):
        qualified = f"opforge::{name}"
        missing = [key for key in ("CPU", "Meta", "Autograd") if not _has_kernel(qualified, key)]
        assert not missing, f"{qualified} has no kernel for {missing}"
        if opforge_torch.build_info().get("cuda"):
            assert _has_kernel(qualified, "CUDA"), f"{qualified} has no CUDA kernel"


@pytest.mark.parametrize("op", OPS, ids=IDS)
def test_every_op_has_its_python_entry_point_and_onnx_tables(op):
    assert op.torch_name in opforge_torch.__all__
    overload = getattr(torch.ops.opforge, op.torch_name).default
    assert overload in opforge_onnx.custom_translation_table()
    assert overload in opforge_onnx.custom_translation_table(decomposed=True)


@pytest.mark.parametrize("op", OPS, ids=IDS)
def test_the_entry_point_gives_the_composed_forms_value(op):
    cases = op.cases("float64")
    case = next((c for c in cases if c.attrs), cases[0])  # attributes passed by keyword too
    tensors = [to_torch(a, "float64") for a in case.inputs]
    attrs = {k: float(np.float32(v)) if op.attributes[k].kind == "float" else v
             for k, v in case.attrs.items()}  # the kernels' float32 value
    got = getattr(opforge_torch, op.torch_name)(*tensors, **attrs)
    composed = op.composed(*tensors, **attrs)
    if op.output_dtypes:  # outputs of their own dtype (float32, quantized): the spec's own bars
        op.check_close(_numpy(got), _numpy(composed), "float64", label="composed", attrs=attrs)
    else:
        # float64: rtol the spec's Swish/GeGLU bar; atol 1e-12, not 1e-15: the composed forms round
        # on their own (GeGLU's 1 + tanh(u) loses |a*b| * 2**-54 for a < 0, test_geglu.py)
        torch.testing.assert_close(got, composed, rtol=1e-12, atol=1e-12)
    outputs = _as_tuple(got)
    assert len(outputs) == len(op.outputs)
    out = tuple(torch.empty_like(t) for t in outputs)
    out = out if len(out) > 1 else out[0]  # (y_out, h_out) for an op with two outputs
    assert getattr(opforge_torch, op.torch_name)(*tensors, **attrs, out=out) is out
    torch.testing.assert_close(out, got, rtol=0, atol=0)


def _as_tuple(result) -> tuple:
    return result if isinstance(result, tuple) else (result,)


def _numpy(result):
    """An op's result as check_close takes it: one float64 array per output."""
    arrays = tuple(to_numpy(t) for t in _as_tuple(result))
    return arrays if len(arrays) > 1 else arrays[0]


class _Call(torch.nn.Module):
    """One call of `op` on its inputs, with `attrs`."""

    def __init__(self, op, attrs):
        super().__init__()
        self.entry, self.attrs = getattr(opforge_torch, op.torch_name), attrs

    def forward(self, *tensors):
        return self.entry(*tensors, **self.attrs)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("dynamo,opset", [(False, 13), (True, 21)], ids=["torchscript-13", "dynamo-21"])
@pytest.mark.parametrize("op", OPS, ids=IDS)
def test_the_specs_decomposition_is_standard_onnx_with_the_ops_value(tmp_path, op, dynamo, opset, dtype):
    """float64 too: a constant of the decomposition (GeGLU's sqrt(2/pi)) must not pass through
    float32 on its way to a float64 graph."""
    import onnx
    import onnxruntime

    case = op.cases(dtype)[0]
    tensors = [to_torch(a, dtype) for a in case.inputs]
    model, path = _Call(op, case.attrs), str(tmp_path / "model.onnx")
    opforge_onnx.export(model, tuple(tensors), path, decomposed=True, dynamo=dynamo, opset_version=opset)
    proto = onnx.load(path)
    assert {n.domain for n in proto.graph.node} == {""} and not proto.functions
    assert {o.domain: o.version for o in proto.opset_import} == {"": opset}
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    _assert_runs_as_the_op(session, model, tensors, op, case.attrs)
    if dtype == "float64":
        got = session.run(None, {i.name: t.numpy() for i, t in zip(session.get_inputs(), tensors)})
        op.check_close(tuple(got) if len(got) > 1 else got[0], op.reference(*case.inputs, **case.attrs),
                       dtype, case.inputs, f"decomposed, {'dynamo' if dynamo else 'TorchScript'}", case.attrs)


def _assert_runs_as_the_op(session, model, tensors, op, attrs=None):
    """Every output of the graph, in ONNX Runtime, is the op's output."""
    assert [o.name for o in session.get_outputs()] and len(session.get_outputs()) == len(op.outputs)
    feeds = {i.name: t.numpy() for i, t in zip(session.get_inputs(), tensors)}
    got = session.run(None, feeds)
    with torch.no_grad():
        expected = _as_tuple(model(*tensors))
    for name, g, e in zip(op.outputs, got, expected):
        if op.quantized_output(name):  # within one quantization step (the decomposition rounds apart)
            qdtype = op.output_dtype(name, "", attrs)
            assert spec.quantized_errors(g.astype(np.float64), to_numpy(e), qdtype).mismatched == 0, name
            continue
        # the spec's tightest float32 bars (Swish's) for every op: ORT (the plugin's kernels, or
        # the decomposition in X's type) against opforge_torch, both within their op's bars of
        # the float64 reference; a float64 graph is held to the spec's own bars just after
        np.testing.assert_allclose(g, e.numpy(), rtol=1e-5, atol=1e-6, err_msg=f"{op.name}: {name}")


@pytest.mark.parametrize("dynamo,opset", [(False, 17), (True, 21)], ids=["torchscript-17", "dynamo-21"])
@pytest.mark.parametrize("op", OPS, ids=IDS)
def test_the_opforge_node_runs_in_onnxruntime_with_the_plugin(tmp_path, op, dynamo, opset):
    """One opforge node per call, with one output per output of the op, that ONNX Runtime runs
    with opforge's plugin (opforge_ort) and gives the op's values."""
    import onnx
    import onnxruntime

    opforge_ort = pytest.importorskip("opforge_ort")
    case = op.cases("float32")[0]
    tensors = [to_torch(a, "float32") for a in case.inputs]
    model, path = _Call(op, case.attrs), str(tmp_path / "model.onnx")
    opforge_onnx.export(model, tuple(tensors), path, dynamo=dynamo, opset_version=opset)
    nodes = [n for n in onnx.load(path).graph.node if n.domain == spec.DOMAIN]
    assert [(n.op_type, len(n.output)) for n in nodes] == [(op.name, len(op.outputs))]
    options = onnxruntime.SessionOptions()
    options.register_custom_ops_library(opforge_ort.library_path())
    session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    _assert_runs_as_the_op(session, model, tensors, op, case.attrs)
