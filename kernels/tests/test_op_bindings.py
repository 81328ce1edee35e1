"""Every op of the spec through its CPU kernel binding (cpu_ops.h: `<Name>Kernel`, generated for an
op of a launcher family), by its index in kOps: its spec cases against the float64 reference within
its tolerances, in float32 and float64. Nothing here names an op, so an op added to the spec (two
files) is checked by being there; the per-op kernel tests (test_kernels.py) go deeper."""
import ctypes
import subprocess
from pathlib import Path

import kernel_checks as checks
import numpy as np
import pytest
from cuda_harness import from_storage, to_storage

import opforge_spec as spec
from opforge_spec.ops.rms_norm_quant import fp8_e4m3fn_decode

HERE = Path(__file__).parent
STORAGE = {"float32": (np.float32, "f32"), "float64": (np.float64, "f64")}


@pytest.fixture(scope="module")
def shim(tmp_path_factory):
    out = tmp_path_factory.mktemp("bindings") / "libshim.so"
    subprocess.run(["g++", "-O2", "-std=c++17", "-shared", "-fPIC", "-Wall", "-Wextra", "-Werror",
                    f"-I{spec.include_dir()}", str(HERE / "cpu_shim.cc"), "-o", str(out)], check=True)
    return ctypes.CDLL(str(out))


def ptr(a):
    return None if a is None else a.ctypes.data_as(ctypes.c_void_p)


def outputs_of(arrays: list):
    """The shim's `outputs` argument: a C array of the output buffers' addresses."""
    return (ctypes.c_void_p * len(arrays))(*(a.ctypes.data for a in arrays))


def run_forward(shim, op, dtype: str, inputs: tuple, attrs: dict):
    """The op's outputs (Y, or (Y, H), or (Q, Scale[, H]) as float64, float8 decoded) from its
    binding, for contiguous inputs in `dtype`."""
    storage, suffix = STORAGE[dtype]
    arrays = dict(zip(op.inputs, (np.array(a, storage, order="C") for a in inputs)))  # rank 0 kept
    x = arrays["X"]
    if op.layout == "elementwise":
        rows, cols = x.size, 1
    else:
        cols = x.shape[-1]
        rows = int(np.prod(x.shape[:-1]))  # rows are kept when X's last dim is 0 (shapes.h row_view)
    values = {**op.defaults(), **attrs}
    names = {n: op.output_dtype(n, dtype, values) for n in op.outputs}
    outputs = [np.zeros(op.output_shape_of(n, x.shape), NUMPY_STORAGE.get(names[n], storage)) for n in op.outputs]
    attr_array = np.array([values[name] for name in op.attributes] or [0.0], np.float32)
    index = list(spec.OPS).index(op.name)
    status = getattr(shim, f"op_forward_{suffix}")(
        ctypes.c_int(index), ptr(x), ptr(arrays.get("R")), ptr(arrays.get("W")), outputs_of(outputs),
        ctypes.c_int64(rows), ctypes.c_int64(cols), ptr(attr_array))
    assert status == 0, f"opforge.{op.name}: no CPU binding reached by its index {index} in kOps"
    if op.output_dtypes:
        outputs = [fp8_e4m3fn_decode(o) if names[n] == "float8_e4m3fn" else o.astype(np.float64)
                   for n, o in zip(op.outputs, outputs)]
    return tuple(outputs) if len(outputs) > 1 else outputs[0]


def family_ops():
    """The ops whose bindings the generator writes (an op of a new shape has its own tests)."""
    return [pytest.param(op, id=op.name) for op in spec.OPS.values() if op.family is not None]


def test_every_op_has_a_family_or_its_own_binding():
    """The spec's families are the kernels' launcher families (cpu_ops.h)."""
    assert {op.family for op in spec.OPS.values()} <= {None, "elementwise", "gated", "row_norm",
                                                       "residual_row_norm", "row_norm_quant",
                                                       "residual_row_norm_quant"}


@pytest.mark.parametrize("dtype", list(STORAGE))
@pytest.mark.parametrize("op", family_ops())
def test_binding_matches_reference(shim, op, dtype):
    for case in op.cases(dtype):
        got = run_forward(shim, op, dtype, case.inputs, case.attrs)
        op.check_close(got, op.reference(*case.inputs, **case.attrs), dtype, case.inputs, case.name, case.attrs)


def run_backward(shim, op, inputs: dict, dy, dh=None):
    """float64 (dX, dW or None) from the op's binding (dR checked to be dX), at its defaults."""
    x, w, r = inputs["x"], inputs["w"], inputs["r"]
    cols = x.shape[-1] if op.layout == "rows" else 1
    rows = x.size // cols
    dx, dr = np.empty_like(x), (np.empty_like(x) if r is not None else None)
    dw = np.zeros(cols, np.float64) if w is not None else None
    attrs = np.array(list(op.defaults().values()) or [0.0], np.float32)
    status = shim.op_backward_f64(ctypes.c_int(list(spec.OPS).index(op.name)), ptr(dy), ptr(dh), ptr(x), ptr(r),
                                  ptr(w), ptr(dx), ptr(dr), ptr(dw), ctypes.c_int64(rows), ctypes.c_int64(cols),
                                  ptr(attrs))
    assert status == 0, f"opforge.{op.name}: no CPU backward reached by its index in kOps"
    if dr is not None:
        np.testing.assert_array_equal(dr, dx, err_msg=f"opforge.{op.name}: dR is not dX")
    return dx, dw


@pytest.mark.parametrize("op", [p for p in family_ops() if p.values[0].has_gradient])
def test_binding_backward_matches_the_float64_gradient(shim, op):
    """dX (and dW) in float64 against kernel_checks' gradients: the row families' formulas, the
    reference's central differences for the others (their own formulas for opforge's ops)."""
    for label, *case in checks.backward_cases(op, "float64", max_elements=1 << 16):
        inputs, dy, dh = contiguous_float64(*case)
        dx, dw = run_backward(shim, op, inputs, dy, dh)
        want_dx, want_dw, dx_scale, dw_scale = checks.backward_reference(op, inputs["x"], inputs["w"], dy,
                                                                         inputs["r"], dh)
        # float64 kernels against formulas, or central differences (up to ~1e-6 at a kink)
        rtol = 1e-9 if checks.has_exact_gradient(op) else 1e-5
        assert_close(dx, want_dx, dx_scale, rtol, f"opforge.{op.name} {label} dX")
        if want_dw is not None:
            assert_close(dw, want_dw, dw_scale, rtol, f"opforge.{op.name} {label} dW")


def contiguous_float64(inputs: dict, dy, dh) -> tuple:
    def array(a):
        return None if a is None else np.array(a, np.float64, order="C")
    return {k: array(v) for k, v in inputs.items()}, array(dy), array(dh)


def assert_close(got, want, scale, rtol, label):
    nan = np.isnan(want)
    assert (np.isnan(got) == nan).all(), f"{label}: NaN at other places"
    error = np.abs(got[~nan] - want[~nan])
    bound = rtol * (scale[~nan] + scale[~nan].max(initial=0.0))
    assert (error <= bound).all(), f"{label}: worst error {error.max(initial=0.0):.3g}"


def test_an_index_past_the_ops_is_refused(shim):
    x = np.zeros(4, np.float32)
    status = shim.op_forward_f32(ctypes.c_int(len(spec.OPS)), ptr(x), None, None, outputs_of([x]),
                                 ctypes.c_int64(4), ctypes.c_int64(1), ptr(np.zeros(1, np.float32)))
    assert status == -1


# ---- a bfloat16 X with a float32 W (shapes.h weight_dtype_ok): the float32 computation ----------

NUMPY_STORAGE = {"bfloat16": np.uint16, "float32": np.float32, "int8": np.int8, "float8_e4m3fn": np.uint8}


def to_bfloat16_bits(values) -> np.ndarray:
    return to_storage("bfloat16", values)


def from_bfloat16_bits(bits) -> np.ndarray:
    """float32 values of bfloat16 bits (exact), for the float32 shim entries."""
    return from_storage("bfloat16", bits).astype(np.float32)


def weighted_ops():
    return [pytest.param(op, id=op.name) for op in spec.OPS.values() if "W" in op.inputs]


def run_forward_as(shim, op, x_dtype: str, suffix: str, arrays: dict, attrs: dict) -> list:
    """Every output of the op's binding (shim entry op_forward_<suffix>), each in its own dtype
    (bfloat16 as bits), for contiguous arrays already in their storage."""
    x = arrays["X"]
    outputs = [np.zeros(op.output_shape_of(name, x.shape), NUMPY_STORAGE[op.output_dtype(name, x_dtype, attrs)])
               for name in op.outputs]
    values = {**op.defaults(), **attrs}
    attr_array = np.array([values[name] for name in op.attributes] or [0.0], np.float32)
    status = getattr(shim, f"op_forward_{suffix}")(
        ctypes.c_int(list(spec.OPS).index(op.name)), ptr(x), ptr(arrays.get("R")), ptr(arrays["W"]),
        outputs_of(outputs), ctypes.c_int64(int(np.prod(x.shape[:-1]))), ctypes.c_int64(x.shape[-1]), ptr(attr_array))
    assert status == 0
    return outputs


def float32_twin(shim, op, x32: np.ndarray, r32, w: np.ndarray, attrs: dict) -> dict:
    """The float32 call a mixed one must equal: a residual op's H (the float32 call's, the op's own
    sum) rounded to bfloat16 first (its kernels round H to X's dtype before normalizing it), R
    then zero."""
    if r32 is None:
        return {"X": x32}
    h32 = run_forward_as(shim, op, "float32", "f32", {"X": x32, "R": r32, "W": w}, attrs)[op.outputs.index("H")]
    h = from_bfloat16_bits(to_bfloat16_bits(h32))
    return {"X": h, "R": np.zeros_like(h)}


@pytest.mark.parametrize("op", weighted_ops())
def test_bfloat16_x_with_float32_w_is_the_float32_computation(shim, op):
    """A mixed call reads W as given and computes in float32: its outputs are the float32 call's
    on the same values, rounded to bfloat16 where they are X's dtype (bit for bit)."""
    checked = 0
    for case in op.cases("float32"):
        named = dict(zip(op.inputs, case.inputs))
        if np.asarray(named["X"]).ndim == 0 or not np.isfinite(np.asarray(named["X"], np.float32)).all():
            continue
        x_bits = to_bfloat16_bits(named["X"])
        r_bits = to_bfloat16_bits(named["R"]) if "R" in named else None
        w = np.ascontiguousarray(named["W"], np.float32)
        mixed = run_forward_as(shim, op, "bfloat16", "bf16_wf32",
                               {"X": x_bits, "R": r_bits, "W": w}, case.attrs)
        twin = float32_twin(shim, op, from_bfloat16_bits(x_bits),
                            None if r_bits is None else from_bfloat16_bits(r_bits), w, case.attrs)
        want = run_forward_as(shim, op, "float32", "f32", {**twin, "W": w}, case.attrs)
        for name, got, expected in zip(op.outputs, mixed, want):
            np.testing.assert_array_equal(*comparable(op, name, case.attrs, got, expected),
                                          err_msg=f"opforge.{op.name} {case.name} {name}")
        checked += 1
    assert checked >= 5, f"opforge.{op.name}: only {checked} finite cases"


def comparable(op, name: str, attrs: dict, got, expected) -> tuple:
    """A mixed call's output and the float32 twin's, as values: X's dtype is the float32 value
    rounded to bfloat16; float8 bits decoded (-0 is 0: the twin's R is +0)."""
    if got.dtype == np.uint16:
        return from_bfloat16_bits(got), from_bfloat16_bits(to_bfloat16_bits(expected))
    if op.output_dtype(name, "bfloat16", attrs) == "float8_e4m3fn":
        return fp8_e4m3fn_decode(got), fp8_e4m3fn_decode(expected)
    return got, expected


@pytest.mark.parametrize("op", [p for p in weighted_ops() if p.values[0].has_gradient])
def test_bfloat16_x_with_float32_w_backward_is_the_float32_one(shim, op):
    """dX (bfloat16) and dW (accumulated in float64 here) of a mixed call: the float32 call's."""
    rng = np.random.default_rng(7)
    x_bits = to_bfloat16_bits(rng.standard_normal((6, 40)))
    dy_bits = to_bfloat16_bits(rng.standard_normal((6, 40)))
    w = rng.uniform(0.5, 1.5, 40).astype(np.float32)
    residual = "R" in op.inputs
    zeros = np.zeros_like(x_bits)
    got = backward_as(shim, op, "bf16_wf32", x_bits, zeros if residual else None, w, dy_bits,
                      zeros if residual else None)
    x32, dy32 = from_bfloat16_bits(x_bits), from_bfloat16_bits(dy_bits)
    want = backward_as(shim, op, "f32", x32, np.zeros_like(x32) if residual else None, w, dy32,
                       np.zeros_like(x32) if residual else None)
    np.testing.assert_array_equal(from_bfloat16_bits(got[0]), from_bfloat16_bits(to_bfloat16_bits(want[0])),
                                  err_msg=f"opforge.{op.name} dX")
    np.testing.assert_array_equal(got[1], want[1], err_msg=f"opforge.{op.name} dW")


def backward_as(shim, op, suffix: str, x, r, w, dy, dh) -> tuple:
    dx, dr = np.empty_like(x), (np.empty_like(x) if r is not None else None)
    dw = np.zeros(x.shape[-1], np.float64)
    attrs = np.array(list(op.defaults().values()) or [0.0], np.float32)
    status = getattr(shim, f"op_backward_{suffix}")(
        ctypes.c_int(list(spec.OPS).index(op.name)), ptr(dy), ptr(dh), ptr(x), ptr(r), ptr(w), ptr(dx), ptr(dr),
        ptr(dw), ctypes.c_int64(x.shape[0]), ctypes.c_int64(x.shape[-1]), ptr(attrs))
    assert status == 0
    return dx, dw
