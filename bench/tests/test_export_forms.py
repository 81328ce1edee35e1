"""The export table's bench (export_forms: which standard ops run in this ONNX Runtime at which
opsets, each form's median time) and the side-by-side decoder comparison of decomposed="auto"
(export_auto), on small shapes. No timing is asserted (benchmarks are not tests): what the runs
report, that every form computes the op (the model), and that auto writes the table's forms."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
pytest.importorskip("opforge_ort", reason="the opforge node's form needs the ORT plugin")

import onnxruntime as ort
from opforge_bench import export_auto, export_forms

NEWEST_WITH_RMS_NORMALIZATION = (1, 23)


def _ort_at_least(version: tuple) -> bool:
    return tuple(int(p) for p in ort.__version__.split(".")[:2]) >= version


def test_standard_forms_run_with_the_ops_values_where_this_ort_has_them():
    opsets = export_forms.standard_opsets("RMSNorm")
    if _ort_at_least(NEWEST_WITH_RMS_NORMALIZATION):
        assert opsets and opsets[0] == 23
    else:
        assert opsets == []
    assert export_forms.standard_opsets("GeGLU") == []  # no standard op


def test_a_wrong_standard_model_is_not_counted_as_running():
    """runs_correctly compares values, not only that the session ran: Swish-24's alpha 1.5 is not
    the spec's default beta 1.0."""
    model = export_forms.standard_model("Swish", 24, 8)
    if not export_forms.runs_correctly("Swish", model):
        pytest.skip(f"Swish-24 does not run in onnxruntime {ort.__version__}")
    import onnx

    wrong = onnx.load_from_string(model)
    wrong.graph.node[0].attribute[0].f = 1.5
    assert not export_forms.runs_correctly("Swish", wrong.SerializeToString())


def test_a_row_holds_every_op_and_its_forms():
    row = export_forms.measure_row(rows=8, cols=16, repeat=2, log=lambda _: None)
    assert row["plugin"] is True
    for op, times in row["median_ms"].items():
        assert {"opforge", "decomposed"} <= set(times), op
        assert ("standard" in times) == bool(row["standard_opsets"].get(op)), op
    assert row["measured"]["date"]


def test_auto_side_by_side_writes_the_tables_forms_and_computes_the_model():
    pytest.importorskip("transformers", reason="the decoder is transformers' LLaMA")
    tiny = {"hidden_size": 64, "intermediate_size": 96, "num_attention_heads": 2,
            "num_key_value_heads": 2}
    result = export_auto.compare(opset=24, tokens=8, repeat=2, config=tiny,
                                 runtime_version=ort.__version__)
    assert set(result["median_ms"]) == set(export_auto.FORMS)
    assert max(result["max_error_vs_torch"].values()) <= 1e-5
    nodes = result["nodes"]
    assert not any(k.startswith("opforge::") for k in nodes["decomposed"])
    assert "RMSNormalization" not in nodes["all-opforge"]
    plan = result["plan"]
    for op, opforge_key in (("RMSNorm", "opforge::RMSNorm"), ("SwiGLU", "opforge::SwiGLU"),
                            ("AddRMSNorm", "opforge::AddRMSNorm")):
        assert (f"  {op}: opforge (" in plan) == (opforge_key in nodes["auto"]), (op, plan, nodes)
    standard = "  RMSNorm: standard (" in plan or "  AddRMSNorm: standard (" in plan
    assert standard == ("RMSNormalization" in nodes["auto"]), (plan, nodes)
