"""The standard ONNX ops an export's decomposed="auto" writes where the runtime has them
(RMSNormalization-23, Swish-24, SwiGLU-28): compared tensor by tensor against the float64
reference with the tolerance of the opforge op they compute, beside opforge nodes; and the
TensorRT runtime's decision on them (no plugin for them, the version each needs)."""

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import opforge_spec as spec
from opforge_align import tolerances, trt

OPSET = 24
# opforge_torch's export table: TensorRT's rows say from which version its parser runs each op's
# standard form (align runs without opforge_torch, so trt.NATIVE_SINCE holds them as op types)
EXPORT_TABLE = Path(__file__).resolve().parents[2] / "torch_ext" / "src" / "opforge_torch" / "export_table.json"


@pytest.fixture
def ort_24():
    """The models are opset 24 (Swish-24 runs from ONNX Runtime 1.24: the export table's rows)."""
    import onnxruntime as ort

    if tuple(int(p) for p in ort.__version__.split(".")[:2]) < (1, 24):
        pytest.skip(f"onnxruntime {ort.__version__} runs no opset-24 Swish (1.24 does)")


def _model(nodes, opsets=(("", OPSET), ("opforge", 1))) -> onnx.ModelProto:
    w = onnx.numpy_helper.from_array(np.linspace(0.5, 1.5, 16, dtype=np.float32), "W")
    graph = helper.make_graph(nodes, "standard",
                              [helper.make_tensor_value_info("X", TensorProto.FLOAT, [4, 16])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    model.ir_version = 10
    return model


def _mixed() -> onnx.ModelProto:
    """RMSNormalization -> opforge Swish -> ai.onnx Swish."""
    return _model([
        helper.make_node("RMSNormalization", ["X", "W"], ["normed"], name="norm", epsilon=1e-5,
                         axis=-1, stash_type=1),
        helper.make_node("Swish", ["normed"], ["gated"], name="opforge_swish", domain="opforge", beta=1.0),
        helper.make_node("Swish", ["gated"], ["Y"], name="onnx_swish", alpha=1.5),
    ])


def test_standard_ops_are_compared_with_their_opforge_ops_tolerance(tmp_path, align, ort_library, ort_24):
    path, report = tmp_path / "mixed.onnx", tmp_path / "report.json"
    onnx.save(_mixed(), path)
    result = align("run", path, "--runtimes", "ort,reference", "--all-tensors", "--json", report)
    assert result.returncode == 0, result.stderr
    tensors = {t["node"]: t for t in json.loads(report.read_text())["tensors"]}
    assert set(tensors) == {"norm", "opforge_swish", "onnx_swish"}
    assert tensors["norm"]["rule"] == "RMSNormalization as opforge::RMSNorm spec float32"
    assert tensors["norm"]["rtol"] == 1e-4  # the spec's RMSNorm bar, not the default 1e-5
    assert tensors["onnx_swish"]["rule"].startswith("Swish as opforge::Swish spec float32")


def test_a_wrong_standard_op_is_found_at_its_node(tmp_path, align, ort_library, ort_24):
    """ORT against a golden file of what the graph should give: a Swish of the wrong alpha (as a
    mistaken export would write) diverges at that node."""
    good, bad = tmp_path / "good.onnx", tmp_path / "bad.onnx"
    onnx.save(_mixed(), good)
    wrong = _mixed()
    wrong.graph.node[2].attribute[0].f = 1.0  # alpha
    onnx.save(wrong, bad)
    golden = tmp_path / "golden.npz"
    assert align("run", good, "--runtimes", "reference", "--all-tensors",
                 "--save-outputs", golden).returncode == 0
    result = align("run", bad, "--runtimes", "ort", "--all-tensors", "--load-outputs", golden)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "onnx_swish" in result.stdout


def test_tolerance_rule_of_every_standard_equivalent_names_its_op():
    for op_type, op in tolerances.STANDARD_EQUIVALENTS.items():
        assert tolerances.own_budget(op_type, "float32") == tolerances.own_budget(f"opforge::{op}", "float32")


def test_standard_equivalents_are_the_spec_forms_with_no_op_before_them():
    # RMSNormalization is RMSNorm's form, not AddRMSNorm's (whose Add comes first)
    assert tolerances.STANDARD_EQUIVALENTS["RMSNormalization"] == "RMSNorm"
    assert set(tolerances.STANDARD_EQUIVALENTS.values()) == {
        name for name, form in spec.standard_forms().items() if not form.after}


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def test_tensorrt_native_versions_are_the_export_tables():
    rows = json.loads(EXPORT_TABLE.read_text())["runtimes"]["tensorrt"]
    first = {}
    for version in sorted(rows, key=_version):
        for op in rows[version].get("standard_opsets", {}):
            first.setdefault(spec.OPS[op].standard.op_type, _version(version))
    op_types = {form.op_type for form in spec.standard_forms().values()}
    assert trt.NATIVE_SINCE == {op_type: first.get(op_type) for op_type in op_types}


# ---- TensorRT: no plugin for the standard ops, each from its documented version -------------------
def test_a_model_of_standard_ops_only_needs_no_plugin():
    standard = _model([helper.make_node("RMSNormalization", ["X", "W"], ["Y"], epsilon=1e-5)],
                      opsets=(("", OPSET),))
    assert not trt.needs_plugin(standard)
    assert trt.needs_plugin(_mixed())


def test_tensorrt_versions_that_cannot_parse_a_standard_op_are_named():
    rms = _model([helper.make_node("RMSNormalization", ["X", "W"], ["Y"], name="n0", epsilon=1e-5)])
    assert trt.native_op_refusal(rms, "10.15.1") is None
    refusal = trt.native_op_refusal(rms, "10.14.1")
    assert refusal is not None and "RMSNormalization needs TensorRT >= 10.15, got 10.14.1" in refusal
    swish = _model([helper.make_node("Swish", ["X"], ["Y"], alpha=1.0)])
    assert "needs TensorRT >= 11.0" in (trt.native_op_refusal(swish, "10.15.1") or "")
    assert trt.native_op_refusal(swish, "11.0.0") is None
    swiglu = _model([helper.make_node("SwiGLU", ["X", "X"], ["Y"])])
    assert "TensorRT parses no SwiGLU" in (trt.native_op_refusal(swiglu, "11.5.0") or "")
    opforge_only = _model([helper.make_node("Swish", ["X"], ["Y"], domain="opforge")])
    assert trt.native_op_refusal(opforge_only, "10.0.1") is None  # the plugin's, not the parser's


def test_an_auto_export_is_compared_tensor_by_tensor(tmp_path, align, ort_library, ort_24):
    """opforge_torch's decomposed="auto" export for ONNX Runtime 1.32 at opset 24 (standard ops
    beside opforge nodes, as the export table names them) agrees with the reference everywhere."""
    torch = pytest.importorskip("torch")
    opforge_torch = pytest.importorskip("opforge_torch")
    opforge_onnx = pytest.importorskip("opforge_torch.onnx")

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.linspace(0.5, 1.5, 16))

        def forward(self, x, r):
            y, h = opforge_torch.add_rms_norm(x, r, self.w, 1e-5)
            return opforge_torch.swiglu(torch.cat([opforge_torch.rms_norm(y, self.w), h], -1)), h

    g = torch.Generator().manual_seed(2)
    inputs = (torch.randn(2, 3, 16, generator=g), torch.randn(2, 3, 16, generator=g))
    path, report = tmp_path / "auto.onnx", tmp_path / "report.json"
    opforge_onnx.export(Block().eval(), inputs, str(path), decomposed="auto",
                        runtime_version="1.32.0", opset_version=OPSET, input_names=["x", "r"])
    forms = {c.op: c.form for c in opforge_onnx.export_plan("onnxruntime", "1.32.0", OPSET).choices}
    result = align("run", path, "--runtimes", "ort,reference", "--all-tensors", "--json", report)
    assert result.returncode == 0, result.stdout + result.stderr
    compared = {t["op"] for t in json.loads(report.read_text())["tensors"]}
    if forms["AddRMSNorm"] == "standard":
        assert "RMSNormalization" in compared
    assert ("opforge::SwiGLU" in compared) == (forms["SwiGLU"] == "opforge")
