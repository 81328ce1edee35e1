import math

import numpy as np
import pytest

import opforge_spec as spec


def test_registry_names_and_defaults():
    assert set(spec.OPS) == {"Swish", "RMSNorm", "SwiGLU", "GeGLU", "AddRMSNorm", "RMSNormQuant", "AddRMSNormQuant"}
    assert spec.OPS["AddRMSNormQuant"].outputs == ("Q", "Scale", "H")
    assert spec.OPS["RMSNormQuant"].defaults() == {"epsilon": 1e-6, "quant_dtype": 3, "scale_ub": 0.0}
    assert spec.OPS["RMSNormQuant"].outputs == ("Q", "Scale") and not spec.OPS["RMSNormQuant"].has_gradient
    assert spec.ADD_RMS_NORM.defaults() == {"epsilon": 1e-6}
    assert spec.ADD_RMS_NORM.outputs == ("Y", "H")
    assert spec.GEGLU.defaults() == {}
    assert spec.SWIGLU.defaults() == {"beta": 1.0}
    assert spec.SWISH.defaults() == {"beta": 1.0}
    assert spec.RMS_NORM.defaults() == {"epsilon": 1e-6}
    assert (spec.include_dir() / "opforge" / "kernels" / "cpu.h").exists()


def test_every_op_has_its_own_math_header():
    """kernels/include/opforge/kernels/ops/<torch_name>.h: the op's math, included by math.h."""
    ops = spec.include_dir() / "opforge" / "kernels" / "ops"
    assert {p.stem for p in ops.glob("*.h")} == {op.torch_name for op in spec.OPS.values()}


@pytest.mark.parametrize("op", spec.OPS.values(), ids=list(spec.OPS))
def test_what_an_out_overload_may_write_over_is_a_row_input_of_the_outputs_shape(op):
    """An output may be an input itself only where each row of the input is read before that row of
    the output is written: an input of the output's shape (never a gated op's X, twice Y's width),
    never the weight W that every row reads."""
    shapes = {"X": (3, 4 * op.split), "R": (3, 4), "W": (4,)}
    output_shapes = {output: op.output_shape_of(output, shapes["X"]) for output in op.outputs}
    for output, inputs in op.overwrites.items():
        assert output in op.outputs
        for name in inputs:
            assert name in op.inputs and name != "W"
            assert shapes[name] == output_shapes[output], (output, name)


def test_swish_reference_is_stable_at_extremes():
    y = spec.SWISH.reference(np.array([1e4, -1e4, 0.0, np.nan, -np.inf]))
    assert y[0] == 1e4 and y[1] == 0.0 and y[2] == 0.0
    assert math.isnan(y[3]) and math.isnan(y[4])
    assert np.allclose(spec.SWISH.reference(np.array([2.0]), beta=0.0), [1.0])


def test_geglu_reference_is_torch_gelu_tanh_and_saturates():
    a = np.array([-3.0, -0.5, 0.0, 0.7, 2.0, 1e4, -1e4, 1e200, -1e200, np.nan, np.inf, -np.inf])
    y = spec.GEGLU.reference(np.concatenate([a, np.ones_like(a)]))
    literal = spec.GEGLU.independent(np.concatenate([a[:5], np.ones(5)]))
    # float64 written two ways: 0.5 * a * (1 + tanh(u)) cancels for a < 0 (a = -3: 1 + tanh(u) =
    # 2.5e-3, so 2**-53 / 2.5e-3 = 4e-14 relative); the literals below carry 16 digits
    np.testing.assert_allclose(y[:5], literal, rtol=1e-12)
    np.testing.assert_allclose(y[:5], [-0.0036373920817729943, -0.15428599017485606, 0.0,
                                       0.5305701347051167, 1.954597694087775], rtol=1e-12)
    assert y[5] == 1e4 and y[6] == 0.0 and y[7] == 1e200 and y[8] == 0.0
    assert math.isnan(y[9]) and y[10] == np.inf and math.isnan(y[11])


def test_rms_norm_reference_zero_rows_and_nan():
    x = np.array([[0.0, 0.0], [3.0, 4.0], [np.nan, 1.0]])
    y = spec.RMS_NORM.reference(x, np.array([1.0, 2.0]), epsilon=0.0)
    assert np.array_equal(y[0], [0.0, 0.0])
    inv = 1 / math.sqrt(12.5)
    assert np.allclose(y[1], [3 * inv, 8 * inv])
    assert np.isnan(y[2]).all()


@pytest.mark.parametrize("dtype", spec.DTYPES)
@pytest.mark.parametrize("op", spec.OPS.values(), ids=list(spec.OPS))
def test_cases_are_representable(op, dtype):
    cases = op.cases(dtype)
    assert {"random", "empty_rows" if "W" in op.inputs else "empty", "non_contiguous"} <= {
        c.name for c in cases}
    for case in cases:
        for x in case.inputs:
            assert np.array_equal(spec.round_to(dtype, x), x, equal_nan=True), case


def test_bfloat16_rounding_is_nearest_even():
    assert spec.round_to("bfloat16", [1.0 + 2**-8])[0] == 1.0            # tie -> even
    assert spec.round_to("bfloat16", [1.0 + 3 * 2**-8])[0] == 1.0 + 2**-6  # tie -> even (up)
    assert np.isnan(spec.round_to("bfloat16", [np.nan])[0])


def test_check_close_names_the_worst_element():
    expected = np.array([1.0, 2.0, 3.0])
    spec.SWISH.check_close(expected.astype(np.float32), expected, "float32")
    with pytest.raises(AssertionError, match=r"index \[1\].*2\.1"):
        spec.SWISH.check_close(np.array([1.0, 2.1, 3.0], np.float32), expected, "float32")
    with pytest.raises(AssertionError, match="1 element"):
        spec.SWISH.check_close(np.array([1.0, np.nan, 3.0]), expected, "float32")


def test_one_ulp_error_is_measured():
    e = np.array([1.0], np.float32)
    a = np.nextafter(e, np.float32(2))
    assert spec.SWISH.errors(a, e.astype(np.float64), "float32").max_ulp == pytest.approx(1.0)


def test_error_text_is_canonical():
    assert spec.error("RMSNorm", "W", "1-D tensor of length 4", "shape [3]") == (
        "opforge.RMSNorm: W: expected 1-D tensor of length 4, got shape [3]")


def test_bad_cases_mention_op_and_input():
    for op in spec.OPS.values():
        for bad in op.bad_cases():
            assert f"opforge.{op.name}" in bad.mentions


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_one_ulp_error_at_zero_is_one_ulp(dtype):
    """The ulp of 0 is the smallest subnormal: a fault that turns 0.0 into it is 1 ulp, not 2e-16."""
    e = np.zeros(1, dtype)
    a = np.nextafter(e, np.ones(1, dtype))
    assert spec.SWISH.errors(a, e.astype(np.float64), dtype).max_ulp == pytest.approx(1.0)
