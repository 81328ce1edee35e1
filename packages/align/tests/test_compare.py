"""The comparison math: errors, ULP, the verdict, and the tolerance budget of each tensor."""
import math

import numpy as np
import pytest
from models import chain

import opforge_spec as spec
from opforge_align import model as models
from opforge_align.compare import measure
from opforge_align.errors import AlignError
from opforge_align.tolerances import DEFAULTS, Override, budgets


def test_identical_tensors_have_no_error():
    x = np.linspace(-3, 3, 50, dtype=np.float32)
    m = measure(x, x.astype(np.float64), 1e-5, 1e-6)
    assert m.ok and m.max_abs == m.max_rel == m.max_ulp == m.p99_ulp == 0 and m.mismatched == 0


def test_one_ulp_is_one_ulp_and_the_worst_element_is_found():
    e = np.array([1.0, 2.0, 4.0, 8.0], np.float32)
    a = e.copy()
    a[2] = np.nextafter(a[2], np.float32(10))
    m = measure(a, e.astype(np.float64), 1e-5, 0.0)
    assert m.ok and m.max_ulp == 1.0 and m.max_abs == pytest.approx(2.0**-21)
    assert m.worst_index == (2,) and m.worst_value == float(a[2]) and m.worst_expected == 4.0


def test_relative_perturbation_beyond_rtol_fails_and_counts_elements():
    e = np.resize([3.0, -3.0], 100)
    a = (e * 1.001).astype(np.float32)
    m = measure(a, e, 1e-4, 0.0)
    # 3.003 rounded to float32 moves the 1e-3 by 2**-23 * 3 / 3e-3 ~ 1e-4 of itself
    assert not m.ok and m.mismatched == 100 and m.max_rel == pytest.approx(1e-3, rel=1e-3)


def test_small_elements_of_a_large_tensor_get_the_tensor_scale_as_slack():
    """|a - e| <= atol + rtol * (|e| + rms(e)): 0.1 % of 1 is inside 1e-4 * (1 + rms 57.7)."""
    e = np.arange(1, 101, dtype=np.float64)
    m = measure((e * 1.001).astype(np.float32), e, 1e-4, 0.0)
    assert m.mismatched == int(np.sum(e * 1e-3 > 1e-4 * (e + np.sqrt(np.mean(e**2)))))
    assert m.worst_index == (99,)


def test_p99_ulp_ignores_a_single_outlier():
    e = np.ones(1000)
    a = np.ones(1000, np.float32)
    a[0] = np.float32(1.0 + 2**-10)  # 8192 ulp at 1.0
    m = measure(a, e, 1e-2, 0.0)
    assert m.max_ulp == 8192.0 and m.p99_ulp == 0.0


def test_near_zero_elements_are_judged_by_the_tensor_scale():
    """A cancelling sum: the element's error comes from operands of size ~1."""
    e = np.array([1.0, -1.0, 1e-9])
    a = np.array([1.0, -1.0, 1e-9 + 3e-7], np.float32)
    assert measure(a, e, 1e-5, 0.0).ok
    assert not measure(a, e, 1e-8, 0.0).ok


def test_nan_and_inf_must_match_the_expected_pattern():
    e = np.array([np.nan, np.inf, 1.0])
    assert measure(np.array([np.nan, np.inf, 1.0], np.float32), e, 1e-5, 0).ok
    m = measure(np.array([1.0, np.inf, 1.0], np.float32), e, 1e-5, 0)
    assert not m.ok and m.mismatched == 1 and m.worst_index == (0,)
    assert not measure(np.array([np.nan, -np.inf, 1.0], np.float32), e, 1e-5, 0).ok


def test_float64_value_beyond_float32_range_equals_float32_inf():
    assert measure(np.array([np.inf], np.float32), np.array([1e39]), 1e-5, 0).ok
    assert not measure(np.array([3e38], np.float32), np.array([1e39]), 1e-5, 0).ok


def test_shape_and_integer_mismatches():
    m = measure(np.zeros((2, 3), np.float32), np.zeros((3, 2)), 1, 1)
    assert not m.ok and m.detail == "shape: expected [3, 2], got [2, 3]"
    assert measure(np.array([1, 2, 3]), np.array([1, 2, 3]), 0, 0).ok
    bad = measure(np.array([1, 2, 3]), np.array([1, 5, 3]), 1, 1)  # integers: exact, always
    assert not bad.ok and bad.worst_index == (1,) and bad.max_abs == 3
    assert measure(np.zeros((0, 4), np.float16), np.zeros((0, 4)), 0, 0).ok


def test_float16_ulp_is_measured_in_float16():
    e = np.array([1.0])
    a = np.array([np.nextafter(np.float16(1), np.float16(2))], np.float16)
    assert measure(a, e, 1e-3, 0).max_ulp == 1.0


def test_budget_grows_like_sqrt_of_the_chain_and_uses_the_spec_for_opforge_ops(tmp_path):
    chain(tmp_path / "c.onnx", 6)
    model = models.load(tmp_path / "c.onnx")
    found = budgets(model, {t.name: "float32" for t in model.tensors})
    rtol32 = DEFAULTS["float32"][0]
    assert found["t0"].rtol == rtol32 and found["t0"].rule == "default float32"   # MatMul
    swish, rms = spec.SWISH.tolerance("float32")[0], spec.RMS_NORM.tolerance("float32")[0]
    assert found["t2"].rtol == pytest.approx(math.sqrt(2 * rtol32**2 + swish**2))
    assert found["t4"].rtol == pytest.approx(math.sqrt(3 * rtol32**2 + swish**2 + rms**2))
    assert found["t4"].rule == "opforge::RMSNorm spec float32 + upstream"


def test_override_replaces_a_budget_and_downstream_grows_from_it(tmp_path):
    chain(tmp_path / "c.onnx", 3)
    model = models.load(tmp_path / "c.onnx")
    found = budgets(model, {t.name: "float32" for t in model.tensors},
                    [Override.parse("t1=0.5,0.25")])
    assert (found["t1"].rtol, found["t1"].atol) == (0.5, 0.25)
    assert found["y"].rtol > 0.5 and found["t0"].rtol == DEFAULTS["float32"][0]


@pytest.mark.parametrize("text", ["y", "y=1", "y=a,b", "=1,2", "y=-1,0"])
def test_bad_overrides_are_refused(text):
    with pytest.raises(AlignError, match="--tolerance: expected TENSOR=RTOL,ATOL"):
        Override.parse(text)


def test_float64_copy_widens_types_initializers_and_casts(tmp_path):
    from onnx import TensorProto, helper, numpy_helper

    init = numpy_helper.from_array(np.ones(3, np.float32), "c")
    nodes = [helper.make_node("Cast", ["x"], ["h"], to=TensorProto.FLOAT16),
             helper.make_node("Cast", ["h"], ["f"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["f", "c"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])], [init])
    wide = models.as_float64(helper.make_model(graph))
    assert [a.i for n in wide.graph.node for a in n.attribute] == [TensorProto.DOUBLE] * 2
    assert wide.graph.initializer[0].data_type == TensorProto.DOUBLE
    assert wide.graph.input[0].type.tensor_type.elem_type == TensorProto.DOUBLE
