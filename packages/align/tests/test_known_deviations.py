"""A listed deviation explains a failed check only in its form, op, dtype, cases and ONNX Runtime
window; anything else stays a failure."""
from __future__ import annotations

from types import SimpleNamespace

from opforge_align.harness.known import explain


def check(op="GeGLU", dtype="float64", case="wide_range", detail=""):
    return SimpleNamespace(op=op, dtype=dtype, case=case, detail=detail)


def test_a_deviation_from_a_release_on_explains_that_release_and_later_only():
    assert "Tanh" in explain(check(), "decomposed-ts", ["1.32.0"])
    assert "Tanh" in explain(check(), "decomposed-dynamo", ["1.33.1"])
    assert explain(check(), "decomposed-ts", ["1.20.1"]) == ""


def test_a_deviation_before_a_release_explains_older_releases_only():
    rms = check(op="RMSNorm", case="random")
    assert "SimplifiedLayerNormalization" in explain(rms, "decomposed-ts", ["1.17.3"])
    assert explain(rms, "decomposed-ts", ["1.32.0"]) == ""


def test_other_cases_dtypes_and_the_fused_form_are_not_explained():
    assert explain(check(case="random"), "decomposed-ts", ["1.32.0"]) == ""
    assert explain(check(dtype="float32"), "decomposed-ts", ["1.32.0"]) == ""
    assert explain(check(), "fused", ["1.32.0"]) == ""


EMPTY_COLS = ("run failed: [ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Non-zero status code returned while running "
              "SimplifiedLayerNormalization node. Status Message: Size of X.shape[axis:] must be at least 1, got 0")


def test_a_deviation_of_every_op_explains_only_the_failure_it_names():
    """ORT's fused SimplifiedLayerNormalization refusing an X without columns, for any op whose
    decomposed form normalizes rows (RMSNormQuant, AddRMSNormQuant, an op added as its two files)."""
    for op in ("RMSNormQuant", "AddRMSNormQuant", "ProbeAddRMSNormQuant"):
        assert "SimplifiedLayerNormalization" in explain(check(op, "float32", "empty_cols", EMPTY_COLS),
                                                         "decomposed-dynamo", ["1.32.0"])
    assert explain(check("AddRMSNormQuant", "float32", "empty_cols", "Q: 3 elements off"),
                   "decomposed-dynamo", ["1.32.0"]) == ""
    assert explain(check("AddRMSNormQuant", "float32", "random", EMPTY_COLS), "decomposed-ts", ["1.32.0"]) == ""
    assert explain(check("AddRMSNormQuant", "float32", "empty_cols", EMPTY_COLS), "fused", ["1.32.0"]) == ""
