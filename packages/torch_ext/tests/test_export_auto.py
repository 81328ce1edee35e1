"""export(decomposed="auto", runtime=..., runtime_version=...): per op the form the export table
names (opforge node, standard ONNX op, decomposed form) for the runtime, its version and the
opset; the standard ops written with the attributes and inputs ONNX defines for them."""

import re

import numpy as np
import onnx
import pytest
import torch
from onnx import helper
from onnx.reference import ReferenceEvaluator

import opforge_spec as spec
import opforge_torch
import opforge_torch.onnx as opforge_onnx
from opforge_torch import export_table

ORT_NEWEST = "1.32.0"
STANDARD_TYPES = {"RMSNormalization", "Swish", "SwiGLU"}


class EveryOp(torch.nn.Module):
    """opforge's ops once each, on [batch, seq, 8] activations (OPS: the ops it calls; an op added
    to the spec later is not in it, and its form cannot be read off this graph)."""

    OPS = ("AddRMSNorm", "RMSNorm", "Swish", "SwiGLU", "RMSNormQuant", "GeGLU")

    def __init__(self, epsilon: float = 1e-5):
        super().__init__()
        self.epsilon = epsilon
        self.w = torch.nn.Parameter(torch.linspace(0.5, 1.5, 8))

    def forward(self, x, r):
        y, h = opforge_torch.add_rms_norm(x, r, self.w, self.epsilon)
        y = opforge_torch.rms_norm(opforge_torch.swish(y, 1.5), self.w, self.epsilon)
        gated = opforge_torch.swiglu(torch.cat([y, h], -1), 0.75)
        _, scale = opforge_torch.rms_norm_quant(h, self.w, self.epsilon)  # its float32 scale compared
        return opforge_torch.geglu(torch.cat([gated, y], -1)), h, scale


def _inputs(seed: int = 0, batch: int = 2) -> tuple:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, 3, 8, generator=g), torch.randn(batch, 3, 8, generator=g)


def _export(tmp_path, opset: int, *, dynamo: bool = True, model=None, version=ORT_NEWEST) -> onnx.ModelProto:
    path = str(tmp_path / f"auto-{opset}.onnx")
    opforge_onnx.export((model or EveryOp()).eval(), _inputs(), path, decomposed="auto",
                        runtime="onnxruntime", runtime_version=version, dynamo=dynamo,
                        opset_version=opset, input_names=["x", "r"])
    return onnx.load(path)


def _forms_written(proto: onnx.ModelProto) -> dict:
    """Per op of EveryOp, the form its node(s) show: the opforge node, a standard op, else
    decomposed."""
    types = {(n.domain, n.op_type) for n in proto.graph.node}
    standard_of = {"RMSNorm": "RMSNormalization", "AddRMSNorm": "RMSNormalization",
                   "Swish": "Swish", "SwiGLU": "SwiGLU"}
    forms = {}
    for op in EveryOp.OPS:
        if (spec.DOMAIN, op) in types:
            forms[op] = "opforge"
        elif op in standard_of and ("", standard_of[op]) in types:
            forms[op] = "standard"
        else:
            forms[op] = "decomposed"
    return forms


def _ort_session(proto: onnx.ModelProto):
    ort = pytest.importorskip("onnxruntime")
    opforge_ort = pytest.importorskip("opforge_ort")
    opset = {o.domain: o.version for o in proto.opset_import}.get("", 0)
    if opset >= 23 and export_table._version_key(ort.__version__) < (1, 24):
        pytest.skip(f"onnxruntime {ort.__version__}: an opset-{opset} export here needs 1.24 (the table)")
    options = ort.SessionOptions()
    options.register_custom_ops_library(opforge_ort.library_path())
    return ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])


# ---- the standard ops as ONNX defines them ------------------------------------------------------
def test_standard_forms_are_the_onnx_ops_of_their_opsets():
    for op, form in export_table.STANDARD_FORMS.items():
        schema = onnx.defs.get_schema(form.op_type)
        assert schema.since_version == form.opset, (op, schema.since_version)
    assert set(onnx.defs.get_schema("RMSNormalization").attributes) == {"epsilon", "axis", "stash_type"}
    assert set(onnx.defs.get_schema("Swish").attributes) == {"alpha"}
    swiglu = onnx.defs.get_schema("SwiGLU")
    assert [i.name for i in swiglu.inputs] == ["A", "B"] and set(swiglu.attributes) == {"alpha"}


class _HelperEmitter:
    """The emitter interface over onnx.helper (constants as Constant nodes)."""

    def __init__(self):
        self.nodes = []

    def op(self, op_type, *inputs, **attributes):
        out = f"t{len(self.nodes)}"
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], **attributes))
        return out

    def ints(self, values):
        out = f"t{len(self.nodes)}"
        self.nodes.append(helper.make_node("Constant", [], [out], value_ints=list(values)))
        return out


@pytest.mark.parametrize("op", sorted(export_table.STANDARD_FORMS))
def test_standard_form_gives_the_ops_values_in_onnx_reference(op):
    """onnx's own reference implementation of the standard op (opset 28) against the spec's
    reference: the attributes (epsilon, alpha) and SwiGLU's halves in the spec's order."""
    op_spec = spec.OPS[op]
    attrs = {name: 0.75 if name == "beta" else 1e-3 for name in op_spec.attributes}
    e = _HelperEmitter()
    returned = export_table.write_standard(e, op, *op_spec.inputs, *attrs.values())
    outputs = list(returned) if len(op_spec.outputs) > 1 else [returned]
    x = np.random.default_rng(3).standard_normal((4, 2 * op_spec.split * 3)).astype(np.float32)
    feeds = {"X": x, "R": x[::-1].copy(), "W": np.linspace(0.5, 1.5, x.shape[-1], dtype=np.float32)}
    feeds = {name: feeds[name] for name in op_spec.inputs}
    graph = helper.make_graph(e.nodes, "g", [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None)
                                             for n in feeds],
                              [helper.make_tensor_value_info(o, onnx.TensorProto.FLOAT, None) for o in outputs])
    got = ReferenceEvaluator(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 28)])).run(None, feeds)
    want = op_spec.reference(*feeds.values(), **attrs)
    for g, w in zip(got, want if len(op_spec.outputs) > 1 else [want]):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    # the spec's StandardForm says what is written: Y by its op type, after the ops it names
    producer = {out: node.op_type for node in e.nodes for out in node.output}
    form = op_spec.standard
    assert producer[outputs[0]] == form.op_type, (op, producer[outputs[0]])
    assert set(form.after) <= set(producer.values()), (op, form.after)


# ---- the choice: the table's form per op -------------------------------------------------------
@pytest.mark.parametrize("opset", [23, 24])
def test_auto_export_for_newest_ort_writes_the_tables_form_and_the_ops_values(tmp_path, opset):
    plan = opforge_onnx.export_plan("onnxruntime", ORT_NEWEST, opset)
    proto = _export(tmp_path, opset)
    assert _forms_written(proto) == {c.op: c.form for c in plan.choices if c.op in EveryOp.OPS}, str(plan)
    assert {o.domain: o.version for o in proto.opset_import}[""] == opset
    onnx.checker.check_model(proto)
    model, (x, r) = EveryOp(), _inputs(seed=5)
    got = _ort_session(proto).run(None, {"x": x.numpy(), "r": r.numpy()})
    with torch.no_grad():
        want = model(x, r)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-5, atol=1e-6)


def test_newest_ort_row_runs_rms_normalization_from_opset_23():
    version, row = export_table.row("onnxruntime", ORT_NEWEST)
    assert version == ORT_NEWEST
    assert 23 in row["standard_opsets"]["RMSNorm"]
    assert not row["standard_opsets"].get("SwiGLU")  # SwiGLU-28 does not run there (measured)


@pytest.mark.parametrize("dynamo,opset", [(True, 21), (False, 17)], ids=["dynamo-21", "torchscript-17"])
def test_auto_below_the_standard_opsets_writes_no_standard_op(tmp_path, dynamo, opset):
    proto = _export(tmp_path, opset, dynamo=dynamo)
    assert not STANDARD_TYPES & {n.op_type for n in proto.graph.node if n.domain in ("", "ai.onnx")}
    assert "standard" not in {c.form for c in opforge_onnx.export_plan("onnxruntime", ORT_NEWEST, opset).choices}
    onnx.checker.check_model(proto)


def test_rms_norm_with_epsilon_0_keeps_rows_of_zeros_zero(tmp_path):
    """RMSNormalization gives NaN on a row of zeros with epsilon 0: such a call falls back."""
    plan = opforge_onnx.export_plan("onnxruntime", ORT_NEWEST, 23)
    if "standard" not in {plan.form("RMSNorm"), plan.form("AddRMSNorm")}:
        pytest.skip(f"the table names no standard RMSNormalization here:\n{plan}")
    proto = _export(tmp_path, 23, model=EveryOp(epsilon=0.0))
    assert "RMSNormalization" not in {n.op_type for n in proto.graph.node}
    x, r = torch.zeros(2, 3, 8), torch.zeros(2, 3, 8)
    got = _ort_session(proto).run(None, {"x": x.numpy(), "r": r.numpy()})
    assert all(np.isfinite(g).all() for g in got)


def test_a_float64_model_keeps_rms_norm_in_float64(tmp_path):
    """RMSNormalization's stash_type 1 computes in float32: a float64 call falls back."""
    plan = opforge_onnx.export_plan("onnxruntime", ORT_NEWEST, 23)
    if "standard" not in {plan.form("RMSNorm"), plan.form("AddRMSNorm")}:
        pytest.skip(f"the table names no standard RMSNormalization here:\n{plan}")
    model = EveryOp().double().eval()
    x, r = (t.double() for t in _inputs(seed=7))
    path = str(tmp_path / "f64.onnx")
    opforge_onnx.export(model, (x, r), path, decomposed="auto", runtime_version=ORT_NEWEST,
                        opset_version=23, input_names=["x", "r"])
    proto = onnx.load(path)
    assert "RMSNormalization" not in {n.op_type for n in proto.graph.node}
    got = _ort_session(proto).run(None, {"x": x.numpy(), "r": r.numpy()})
    with torch.no_grad():
        want = model(x, r)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-12, atol=1e-12)


# ---- the decision rule, on rows of its own ------------------------------------------------------
ROW = {"plugin": True, "standard_opsets": {"RMSNorm": [23, 24]},
       "median_ms": {"RMSNorm": {"opforge": 25.0, "standard": 37.0, "decomposed": 60.0},
                     "Swish": {"opforge": 10.0, "decomposed": 5.0}}}


def test_standard_op_wins_unless_another_form_is_measurably_faster():
    choose = export_table._choose
    assert choose("RMSNorm", ROW, 23, None).form == "opforge"  # 25 < 0.9 * 37
    close = {**ROW, "median_ms": {"RMSNorm": {"opforge": 35.0, "standard": 37.0}}}
    assert choose("RMSNorm", close, 24, None).form == "standard"
    assert choose("RMSNorm", ROW, 22, None).form == "opforge"  # below RMSNormalization's opset
    assert choose("RMSNorm", {**ROW, "standard_opsets": {"RMSNorm": [21, 22]}}, 22, None).form == "opforge"
    assert choose("Swish", ROW, 24, None).form == "decomposed"  # measured faster than the node
    prefer = {"form": "decomposed", "why": "a layout pass"}
    assert choose("SwiGLU", ROW, 24, prefer).why == "a layout pass"
    no_plugin = {**ROW, "plugin": False}
    assert choose("GeGLU", no_plugin, 24, None).form == "decomposed"


def test_the_report_names_each_ops_form_and_why():
    plan = opforge_onnx.export_plan("onnxruntime", ORT_NEWEST, 24)
    text = str(plan)
    for choice in plan.choices:
        assert f"{choice.op}: {choice.form} (" in text
    assert "onnxruntime 1.32.0" in text and "opset 24" in text


def test_a_version_between_rows_takes_the_row_below():
    listed = sorted(export_table.table()["runtimes"]["tensorrt"], key=export_table._version_key)
    assert export_table.row("tensorrt", "10.16.1")[0] == "10.15"
    assert export_table.row("tensorrt", listed[-1] + ".9")[0] == listed[-1]


@pytest.mark.parametrize("kwargs, message", [
    ({"runtime_version": "1.10.0"}, "runtime_version: expected onnxruntime >= 1.17.3"),
    ({"runtime": "tensorrt", "runtime_version": "8.6"}, "runtime_version: expected tensorrt >= 10.0"),
])
def test_a_version_below_the_table_is_refused_in_one_line(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)) as info:
        opforge_onnx.export(EveryOp(), _inputs(), str(tmp_path / "m.onnx"), decomposed="auto", **kwargs)
    assert "\n" not in str(info.value)


def test_tensorrt_takes_the_standard_ops_its_documentation_lists():
    plan = opforge_onnx.export_plan("tensorrt", "11.0", 24)
    assert plan.form("RMSNorm") == "standard" and plan.form("Swish") == "standard"
    assert plan.form("SwiGLU") == "opforge"
    old = opforge_onnx.export_plan("tensorrt", "10.14", 24)
    assert old.ops("standard") == frozenset()


def test_runtime_fuses_is_the_tables_preference():
    prefer = export_table.table()["prefer"]
    for runtime, ops in opforge_onnx.RUNTIME_FUSES.items():
        assert {op for op, p in prefer.get(runtime, {}).items() if p["form"] == "decomposed"} == ops


def test_an_opset_the_dynamo_exporter_cannot_convert_to_is_refused_in_one_line(tmp_path):
    """torch's dynamo exporter writes opset 18 and converts it; above opset 25 its converter has
    no adapter for RMSNormalization and keeps opset 18, saying so only in its log."""
    plan = opforge_onnx.export_plan("onnxruntime", ORT_NEWEST, 26)
    if not plan.ops("standard"):
        pytest.skip(f"the table names no standard op at opset 26:\n{plan}")
    with pytest.raises(RuntimeError, match=r"opset_version: expected the model written at opset "
                                           r"26 \(the standard op of .*\), got opset 18") as info:
        _export(tmp_path, 26)
    assert "\n" not in str(info.value)
