"""A listed deviation explains a failed check only in its form, op, dtype, cases and ONNX Runtime
window; anything else stays a failure."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

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


# The failures of the ci-gpu profile's align stage (ONNX Runtime 1.24.4 and 1.31.1), made here the
# way the harness makes them: each output against the spec's reference (checks.against_reference),
# the runtime's outputs rebuilt from what it was measured to compute.
CI_GPU = ["1.24.4", "1.31.1"]


def _quant_case(op_name: str, case: str):
    import opforge_spec

    op = opforge_spec.OPS[op_name]
    found = next(c for c in op.cases("float64") if c.name == case)
    return op, found.inputs, dict(found.attrs)


def _reference_check(op, outputs, inputs, attrs, case: str):
    from opforge_align.harness.checks import against_reference

    return against_reference(op, outputs, inputs, attrs, "float64", layer="2",
                             subject="ort.decomposed-ts", case=case)


def _with(op, outputs: tuple, **replaced) -> tuple:
    return tuple(replaced.get(name, value) for name, value in zip(op.outputs, outputs))


def test_geglu_tanh_cancellation_is_explained_from_1_24_on_only():
    detail = ("worst element at index [1, 17]: got np.float64(0.0), expected "
              "np.float64(1.5475181556567394e-15)")
    for version in [*CI_GPU, "1.32.0"]:
        assert "Tanh" in explain(check(detail=detail), "decomposed-ts", [version]), version
    for version in ("1.17.3", "1.20.1"):  # correctly rounded there: a failure there is one
        assert explain(check(detail=detail), "decomposed-ts", [version]) == "", version


def test_the_fused_float64_epsilon_explains_scale_before_1_32_only():
    """ORT < 1.32 runs the fused float64 RMSNorm with epsilon 1e-5 instead of the graph's 1e-6: the
    reference computed with 1e-5 is the Scale it returned (the Q rounds the same Y)."""
    for op_name in ("RMSNormQuant", "AddRMSNormQuant"):
        for case in ("random", "defaults", "large"):
            op, inputs, attrs = _quant_case(op_name, case)
            fused = op.reference(*inputs, **{**attrs, "epsilon": 1e-5})
            failed = _reference_check(op, fused, inputs, attrs, case)
            assert not failed.passed and failed.output == "Scale", failed.detail
            for version in [*CI_GPU, "1.17.3"]:
                assert "default 1e-5" in explain(failed, "decomposed-ts", [version]), (op_name, case)
                assert "default 1e-5" in explain(failed, "decomposed-dynamo", [version]), (op_name, case)
            assert explain(failed, "decomposed-ts", ["1.32.0"]) == ""
            assert explain(failed, "custom-ts", CI_GPU) == ""  # the opforge node: our kernels
            assert explain(check(op_name, "float32", case, failed.detail), "decomposed-ts", CI_GPU) == ""


def test_the_fused_float64_epsilon_does_not_explain_a_wrong_q():
    op, inputs, attrs = _quant_case("RMSNormQuant", "random")
    q, scale = op.reference(*inputs, **attrs)
    off = q.copy()
    off[0, :4] = off[0, :4] + 3  # three quantization steps: not an epsilon's doing
    wrong_q = _reference_check(op, (off, scale), inputs, attrs, "random")
    assert not wrong_q.passed and "output Q:" in wrong_q.detail
    assert explain(wrong_q, "decomposed-ts", CI_GPU) == ""
    fused_scale = op.reference(*inputs, **{**attrs, "epsilon": 1e-5})[1]
    both = _reference_check(op, (off, fused_scale), inputs, attrs, "random")  # Scale's and Q's
    assert "output Scale:" in both.detail and "output Q:" in both.detail
    assert explain(both, "decomposed-ts", CI_GPU) == ""


@pytest.mark.parametrize("case,returned,expected", [("empty_rows", (0, 16), (0, 1)),
                                                    ("empty_cols", (3, 0), (3, 1))])
def test_a_scale_of_the_input_shape_without_elements_is_explained_before_1_32_only(case, returned, expected):
    """ORT < 1.32's ReduceMax over the last axis of a [0, 16] input returns [0, 16], of a [3, 0]
    input [3, 0]: the decomposed form's Scale has X's shape there."""
    for op_name in ("RMSNormQuant", "AddRMSNormQuant"):
        for dtype in ("float32", "float64"):
            op, inputs, attrs = _quant_case(op_name, case)
            outputs = op.reference(*inputs, **attrs)
            assert dict(zip(op.outputs, outputs))["Scale"].shape == expected
            got = _with(op, outputs, Scale=np.zeros(returned, np.float32))
            failed = _reference_check(op, got, inputs, attrs, case)
            failed.dtype = dtype
            assert failed.detail == f"output Scale: shape: expected {list(expected)}, got {list(returned)}"
            for version in [*CI_GPU, "1.17.3"]:
                assert "without elements" in explain(failed, "decomposed-ts", [version]), (op_name, dtype)
            assert explain(failed, "decomposed-ts", ["1.32.0"]) == ""
            assert explain(failed, "custom-ts", CI_GPU) == ""
            other_case = _reference_check(op, got, inputs, attrs, "random")
            assert explain(other_case, "decomposed-ts", CI_GPU) == ""
            other_shape = _with(op, outputs, Scale=np.zeros((*returned[:-1], 2), np.float32))
            assert explain(_reference_check(op, other_shape, inputs, attrs, case),
                           "decomposed-ts", CI_GPU) == ""
