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

import opforge_spec as spec

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


def run_forward(shim, op, dtype: str, inputs: tuple, attrs: dict):
    """The op's outputs (Y, or (Y, H)) from its binding, for contiguous inputs in `dtype`."""
    storage, suffix = STORAGE[dtype]
    arrays = dict(zip(op.inputs, (np.array(a, storage, order="C") for a in inputs)))  # rank 0 kept
    x = arrays["X"]
    if op.layout == "elementwise":
        rows, cols = x.size, 1
    else:
        cols = x.shape[-1]
        rows = x.size // cols if cols else 0
    outputs = [np.empty(op.output_shape(x.shape), storage)] + [np.empty(x.shape, storage)
                                                              for _ in op.outputs[1:]]
    values = {**op.defaults(), **attrs}
    attr_array = np.array([values[name] for name in op.attributes] or [0.0], np.float32)
    index = list(spec.OPS).index(op.name)
    status = getattr(shim, f"op_forward_{suffix}")(
        ctypes.c_int(index), ptr(x), ptr(arrays.get("R")), ptr(arrays.get("W")), ptr(outputs[0]),
        ptr(outputs[1] if len(outputs) > 1 else None), ctypes.c_int64(rows), ctypes.c_int64(cols),
        ptr(attr_array))
    assert status == 0, f"opforge.{op.name}: no CPU binding reached by its index {index} in kOps"
    return tuple(outputs) if len(outputs) > 1 else outputs[0]


def family_ops():
    """The ops whose bindings the generator writes (an op of a new shape has its own tests)."""
    return [pytest.param(op, id=op.name) for op in spec.OPS.values() if op.family is not None]


def test_every_op_has_a_family_or_its_own_binding():
    """The spec's families are the kernels' launcher families (cpu_ops.h)."""
    assert {op.family for op in spec.OPS.values()} <= {None, "elementwise", "gated", "row_norm",
                                                       "residual_row_norm"}


@pytest.mark.parametrize("dtype", list(STORAGE))
@pytest.mark.parametrize("op", family_ops())
def test_binding_matches_reference(shim, op, dtype):
    for case in op.cases(dtype):
        got = run_forward(shim, op, dtype, case.inputs, case.attrs)
        op.check_close(got, op.reference(*case.inputs, **case.attrs), dtype, case.inputs, case.name)


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


@pytest.mark.parametrize("op", family_ops())
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
    status = shim.op_forward_f32(ctypes.c_int(len(spec.OPS)), ptr(x), None, None, ptr(x), None,
                                 ctypes.c_int64(4), ctypes.c_int64(1), ptr(np.zeros(1, np.float32)))
    assert status == -1
