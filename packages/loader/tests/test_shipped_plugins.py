"""The plugins built with the package: libops_opforge_nn.so.1 against the op spec, and Scale."""
import os
import subprocess

import numpy as np
import pytest

import opforge_loader

spec = pytest.importorskip("opforge_spec", reason="pip install ./kernels (the op spec) to run these")

NN = os.path.join(opforge_loader.plugin_dir(), "libops_opforge_nn.so.1")


@pytest.fixture(scope="module")
def shipped():
    reg = opforge_loader.Registry(opforge_loader.plugin_dir(), log=lambda level, line: None)
    yield reg
    reg.close()


def test_shipped_plugins_load_with_manifests(shipped):
    assert shipped.refusals == []
    assert {(o.plugin, o.domain, o.name, o.version_major) for o in shipped.ops()} == {
        ("opforge_nn", spec.DOMAIN, name, spec.DOMAIN_VERSION) for name in spec.OPS} | {
        ("example_scale", "example", "Scale", 1)}
    for lib in ("libops_opforge_nn.so.1", "libops_example_scale.so.1"):
        out = subprocess.run(["readelf", "-d", os.path.join(opforge_loader.plugin_dir(), lib)], capture_output=True, text=True).stdout
        assert f"Library soname: [{lib}]" in out


@pytest.mark.parametrize("op_name", list(spec.OPS))
def test_declares_the_spec_inputs_and_outputs(shipped, op_name):
    """The op's tensors as its descriptor has them: X[, R][, W] in, each output with its dtypes."""
    info = next(o for o in shipped.ops() if (o.plugin, o.name) == ("opforge_nn", op_name))
    assert tuple(i.name for i in info.inputs) == spec.OPS[op_name].inputs
    assert tuple(o.name for o in info.outputs) == spec.OPS[op_name].outputs
    assert [o.dtypes for o in info.outputs] == [_declared_dtypes(spec.OPS[op_name], name) for name in info.outputs]


def _declared_dtypes(op, output) -> tuple:
    """What an output may be: X's dtypes, its fixed one, or the choices of the attribute picking it."""
    rule = op.output_dtypes.get(output.name)
    if rule is None:
        return ("float32", "float64", "bfloat16")
    return tuple(op.attributes[rule].choices) if rule in op.attributes else (rule,)


def _output_shapes(op, x_shape) -> list:
    """Each output's shape by its rule (Y the op's, H X's, a per-row scale X's with the last dim 1)."""
    return [tuple(op.output_shape_of(name, x_shape)) for name in op.outputs]


def _numpy_dtype(name: str) -> np.dtype:
    if name in ("bfloat16", "float8_e4m3fn"):  # numpy has neither: ml_dtypes'
        ml_dtypes = pytest.importorskip("ml_dtypes", reason=f"{name} arrays need ml_dtypes")
        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)


def _comparable(outputs: tuple) -> object:
    """The outputs as check_close takes them: float8 and bfloat16 read as float32, one array bare."""
    wide = tuple(a.astype(np.float32) if a.dtype.name in ("bfloat16", "float8_e4m3fn") else a for a in outputs)
    return wide[0] if len(wide) == 1 else wide


def _as_outputs(op, result) -> tuple:
    """shipped.run's result as a tuple of the op's outputs (one array for a one-output op)."""
    if len(op.outputs) == 1:
        return (result,)
    assert isinstance(result, tuple) and len(result) == len(op.outputs), result
    return result


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("op_name", list(spec.OPS))
def test_matches_spec_reference(shipped, op_name, dtype):
    op = spec.OPS[op_name]
    for case in op.cases(dtype):
        outputs = _as_outputs(op, shipped.run(op_name, list(case.inputs), case.attrs))
        wanted = [_numpy_dtype(op.output_dtype(name, dtype, case.attrs)) for name in op.outputs]
        assert [(a.dtype, a.shape) for a in outputs] == list(zip(wanted, _output_shapes(
            op, np.shape(case.inputs[0])))), case.name
        op.check_close(_comparable(outputs), op.reference(*case.inputs, **case.attrs), dtype, case.inputs, case.name,
                       attrs=case.attrs)


@pytest.mark.parametrize("op_name", list(spec.OPS))
def test_bad_inputs_give_canonical_errors(shipped, op_name):
    op = spec.OPS[op_name]
    for bad in op.bad_cases():
        with pytest.raises(opforge_loader.OpforgeError) as info:
            shipped.run(op_name, list(bad.inputs), bad.attrs)
        message = str(info.value)
        assert message.startswith(f"opforge.{op_name}: "), message
        for mention in bad.mentions:
            assert mention in message, (bad.name, message)
        assert ": expected " in message and ", got " in message, message


def test_rms_norm_message_shape(shipped):
    x = np.ones((2, 64), np.float32)
    with pytest.raises(opforge_loader.OpforgeError) as info:
        shipped.run("RMSNorm", [x, np.ones(32, np.float32)])
    assert str(info.value) == "opforge.RMSNorm: W: expected 1-D tensor of length 64 (last dim of X), got shape [32]"


def test_wrong_input_count_and_unknown_attr(shipped):
    x = np.ones(3, np.float32)
    with pytest.raises(opforge_loader.OpforgeError, match=r"opforge.RMSNorm: inputs: expected 2 tensors \(X, W\), got 1"):
        shipped.run("RMSNorm", [x])
    with pytest.raises(opforge_loader.OpforgeError, match=r"opforge.Swish: alpha: expected one of the attributes \[beta\]"):
        shipped.run("Swish", [x], {"alpha": 1.0})


def test_scale(shipped):
    x = np.arange(6, dtype=np.float64).reshape(2, 3)
    np.testing.assert_array_equal(shipped.run("example::Scale", [x], {"scale": 2.5}), x * 2.5)
    np.testing.assert_array_equal(shipped.run("Scale", [x.astype(np.float32)]), x.astype(np.float32))


@pytest.mark.parametrize("op_name", list(spec.OPS))
def test_bfloat16_matches_spec(shipped, op_name):
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="bfloat16 arrays need ml_dtypes (pip install opforge-loader[bf16])")
    op = spec.OPS[op_name]
    for case in op.cases("bfloat16"):
        inputs = [np.asarray(a, np.float32).astype(ml_dtypes.bfloat16) for a in case.inputs]
        outputs = _as_outputs(op, shipped.run(op_name, inputs, case.attrs))
        wanted = [_numpy_dtype(op.output_dtype(name, "bfloat16", case.attrs)) for name in op.outputs]
        assert [a.dtype for a in outputs] == wanted, case.name
        op.check_close(_comparable(outputs), op.reference(*case.inputs, **case.attrs), "bfloat16", case.inputs,
                       case.name, attrs=case.attrs)


@pytest.mark.parametrize("op_name", [name for name, op in spec.OPS.items() if "R" in op.inputs])
def test_residual_of_another_shape_or_dtype_is_refused(shipped, op_name):
    """R is X's shape and dtype: the spec's canonical text, never a read past R's end."""
    op = spec.OPS[op_name]
    x, w = np.ones((2, 4), np.float32), np.ones(4, np.float32)

    def run_with(r):
        with pytest.raises(opforge_loader.OpforgeError) as info:
            shipped.run(op_name, [r if name == "R" else w if name == "W" else x for name in op.inputs])
        return str(info.value)

    for r in (np.ones((2, 3), np.float32), np.ones(8, np.float32), np.ones((1, 4), np.float32)):
        assert run_with(r) == op.r_error(x.shape, r.shape)
    assert run_with(np.ones((2, 4), np.float64)) == f"opforge.{op_name}: R: expected dtype float32 (same as X), got float64"


@pytest.mark.parametrize("op_name, attr, value", [
    ("Swish", "beta", 1e39), ("Swish", "beta", float("-inf")), ("Swish", "beta", float("nan")),
    ("Swish", "beta", -3.5e38), ("RMSNorm", "epsilon", 1e300), ("RMSNorm", "epsilon", -1.0),
    ("AddRMSNorm", "epsilon", 1e300), ("AddRMSNorm", "epsilon", float("inf"))])
def test_attributes_follow_the_shared_float32_rule(shipped, op_name, attr, value):
    """The same rule and text as every layer (opforge_spec / kernels attrs.h): finite in float32."""
    op = spec.OPS[op_name]
    inputs = [np.ones((2, 4), np.float32) if name != "W" else np.ones(4, np.float32) for name in op.inputs]
    with pytest.raises(opforge_loader.OpforgeError) as info:
        shipped.run(op_name, inputs, {attr: value})
    assert str(info.value) == op.attributes[attr].error(op_name, value)


def test_largest_float32_attribute_is_accepted(shipped):
    x = np.ones(3, np.float32)
    np.testing.assert_array_equal(shipped.run("Swish", [x], {"beta": 3.4028234663852886e38}), x)


# ---- a float32 W with a bfloat16 X (opforge_spec.weight_dtypes): computed in float32 with the
# weight as given, as HF's Gemma keeps its norm weight ----------------------------------------------

WEIGHTED = [name for name, op in spec.OPS.items() if "W" in op.inputs]


def _mixed_inputs(op, arrays, ml_dtypes) -> list:
    """X and R in bfloat16, W in float32."""
    return [np.asarray(a, np.float32) if name == "W" else np.asarray(a, np.float32).astype(ml_dtypes.bfloat16)
            for name, a in zip(op.inputs, arrays)]


@pytest.mark.parametrize("op_name", WEIGHTED)
def test_float32_w_with_bfloat16_x_matches_spec(shipped, op_name):
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="bfloat16 arrays need ml_dtypes (pip install opforge-loader[bf16])")
    op = spec.OPS[op_name]
    for case in op.cases("bfloat16"):
        inputs = _mixed_inputs(op, case.inputs, ml_dtypes)
        outputs = _as_outputs(op, shipped.run(op_name, inputs, case.attrs))
        wanted = [_numpy_dtype(op.output_dtype(name, "bfloat16", case.attrs)) for name in op.outputs]
        assert [a.dtype for a in outputs] == wanted, case.name
        w = inputs[op.inputs.index("W")].astype(np.float64)  # the weight as the kernel got it
        expected = op.reference(*[w if name == "W" else a for name, a in zip(op.inputs, case.inputs)], **case.attrs)
        op.check_close(_comparable(outputs), expected, "bfloat16", case.inputs, case.name, attrs=case.attrs)


@pytest.mark.parametrize("op_name", [n for n in WEIGHTED if "Y" in spec.OPS[n].outputs and "Y" not in spec.OPS[n].output_dtypes])
def test_float32_w_is_not_rounded_to_bfloat16(shipped, op_name):
    """Y is the float32-weight result rounded once to bfloat16, which differs from the result with W
    rounded to bfloat16 first in many elements (HF's Gemma measured 27%). R is zero: H is X."""
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="bfloat16 arrays need ml_dtypes (pip install opforge-loader[bf16])")
    op = spec.OPS[op_name]
    rng = np.random.default_rng(5)
    x = spec.round_to("bfloat16", rng.standard_normal((64, 256)))
    w = (1.0 + rng.normal(0.0, 0.1, 256)).astype(np.float32)
    arrays = [w if name == "W" else x if name == "X" else np.zeros_like(x) for name in op.inputs]
    y = _as_outputs(op, shipped.run(op_name, _mixed_inputs(op, arrays, ml_dtypes)))[0].astype(np.float32)

    def y_of(weight):
        out = op.reference(*[np.asarray(weight if name == "W" else a, np.float64) for name, a in zip(op.inputs, arrays)])
        return spec.round_to("bfloat16", out[0] if isinstance(out, tuple) else out)

    exact, from_rounded_w = y_of(w), y_of(spec.round_to("bfloat16", w))
    assert np.mean(from_rounded_w != exact) > 0.1  # the case tells the two apart
    assert np.mean(y != exact) < 0.01, np.mean(y != exact)  # float32 vs float64 rounding ties only
    assert np.mean(y != from_rounded_w) > 0.1


@pytest.mark.parametrize("x_dtype,w_dtype", [("bfloat16", "float64"), ("float64", "float32"), ("float32", "float64")])
@pytest.mark.parametrize("op_name", WEIGHTED)
def test_other_w_dtypes_are_refused(shipped, op_name, x_dtype, w_dtype):
    """W's dtype rule and text are the spec's (OpSpec.w_dtype_error); R stays X's dtype."""
    op = spec.OPS[op_name]
    x = np.ones((2, 4), np.float32).astype(_numpy_dtype(x_dtype))
    w = np.ones(4, w_dtype)
    with pytest.raises(opforge_loader.OpforgeError) as info:
        shipped.run(op_name, [w if name == "W" else x for name in op.inputs])
    assert str(info.value) == op.w_dtype_error(x_dtype, w_dtype)


@pytest.mark.parametrize("op_name", [n for n in WEIGHTED if "R" in spec.OPS[n].inputs])
def test_r_keeps_x_dtype_with_a_float32_w(shipped, op_name):
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="bfloat16 arrays need ml_dtypes (pip install opforge-loader[bf16])")
    x = np.ones((2, 4), ml_dtypes.bfloat16)
    r, w = np.ones((2, 4), np.float32), np.ones(4, np.float32)
    with pytest.raises(opforge_loader.OpforgeError) as info:
        shipped.run(op_name, [x, r, w])
    assert str(info.value) == f"opforge.{op_name}: R: expected dtype bfloat16 (same as X), got float32"
