"""The shared kernels themselves, compiled here and driven through a tiny C shim, against the spec."""
import ctypes
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import opforge_spec as spec

HERE = Path(__file__).parent
STORAGE = {"float32": (np.float32, "f32"), "float64": (np.float64, "f64"),
           "bfloat16": (np.uint16, "bf16")}


# "dispatch" is what ships (target_clones picks the widest clone this CPU runs); the fixed builds
# make sure the narrower clones are right too, whatever machine the tests run on.
VARIANTS = {"dispatch": [], "x86-64-v3": ["-DOPFORGE_NO_CLONES", "-march=x86-64-v3"],
            "baseline": ["-DOPFORGE_NO_CLONES"]}


def cpu_supports(flag):
    try:
        return flag in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


@pytest.fixture(scope="module", params=list(VARIANTS))
def shim(request, tmp_path_factory):
    if request.param == "x86-64-v3" and not (cpu_supports(" avx2") and cpu_supports(" fma")):
        pytest.skip("this CPU has no AVX2+FMA: the x86-64-v3 build cannot run here")
    out = tmp_path_factory.mktemp("shim") / f"libshim-{request.param}.so"
    subprocess.run(["g++", "-O2", "-std=c++17", "-shared", "-fPIC", "-Wall", "-Wextra", "-Werror",
                    *VARIANTS[request.param], f"-I{spec.include_dir()}",
                    str(HERE / "cpu_shim.cc"), "-o", str(out)], check=True)
    return ctypes.CDLL(str(out))


@pytest.mark.parametrize("march", ["x86-64-v3", "x86-64-v4"])
def test_float_loops_vectorize(tmp_path, march):
    """A branch in a loop body keeps GCC from vectorizing it for AVX2 (it did once: 18x slower)."""
    report = subprocess.run(
        ["g++", "-O2", "-std=c++17", "-DOPFORGE_NO_CLONES", f"-march={march}",
         "-fopt-info-vec-optimized", f"-I{spec.include_dir()}", "-c", str(HERE / "cpu_shim.cc"),
         "-o", str(tmp_path / "shim.o")], capture_output=True, text=True, check=True).stderr
    cpu_h = (spec.include_dir() / "opforge" / "kernels" / "cpu.h").read_text().splitlines()
    def loop_line(name):  # 1-based line of the `for` that follows the function's signature
        start = next(i for i, line in enumerate(cpu_h) if f"void {name}(" in line)
        return next(i + 1 for i in range(start, len(cpu_h)) if cpu_h[i].lstrip().startswith("for"))

    loops = {name: loop_line(name) for name in ("elementwise_forward_loop", "elementwise_backward_loop",
                                                "gated_forward_loop", "gated_backward_loop")}
    for name, line in loops.items():
        assert re.search(rf"cpu\.h:{line}:\d+: optimized: loop vectorized using (32|64) byte",
                         report), f"{name} (cpu.h:{line}) not vectorized for {march}:\n{report}"


def to_storage(dtype, a):
    a = np.array(a, order="C")  # ascontiguousarray would turn rank 0 into rank 1
    if dtype == "bfloat16":
        return np.asarray((np.asarray(a, np.float32).view(np.uint32) >> 16).astype(np.uint16))
    return a.astype(STORAGE[dtype][0])


def from_storage(dtype, a):
    if dtype == "bfloat16":
        return (a.astype(np.uint32) << 16).view(np.float32)
    return a


def ptr(a):
    return a.ctypes.data_as(ctypes.c_void_p)


def _rows_cols(x):
    cols = x.shape[-1] if x.ndim else 1
    return (x.size // cols if cols else 0), cols


# numpy storage of an output of its own dtype (float8 as its bits, decoded after)
OWN_STORAGE = {"int8": np.int8, "float8_e4m3fn": np.uint8, "float32": np.float32}


def run_by_descriptor(shim, op, dtype, stored, attrs):
    """An op whose outputs are not all of X's dtype (the quantized rows' families: RMSNormQuant,
    AddRMSNormQuant): its binding through op_forward (by its index in kOps), each output in a buffer
    of its own dtype (X's storage for H), float8 decoded from its bits, bfloat16 widened."""
    x = stored[0]
    values = {**op.defaults(), **attrs}
    names = {n: op.output_dtype(n, dtype, values) for n in op.outputs}
    outs = [np.zeros(op.output_shape_of(n, x.shape), OWN_STORAGE.get(names[n], x.dtype)) for n in op.outputs]
    arrays = dict(zip(op.inputs, stored))
    rows = int(np.prod(x.shape[:-1]))  # rows are kept when X's last dim is 0 (shapes.h row_view)
    attr_array = np.array([values[name] for name in op.attributes], np.float32)
    status = getattr(shim, f"op_forward_{STORAGE[dtype][1]}")(
        ctypes.c_int(list(spec.OPS).index(op.name)), ptr(x), ptr(arrays["R"]) if "R" in arrays else None,
        ptr(arrays["W"]), (ctypes.c_void_p * len(outs))(*(o.ctypes.data for o in outs)), ctypes.c_int64(rows),
        ctypes.c_int64(x.shape[-1]), ptr(attr_array))
    assert status == 0, op.name
    from opforge_spec.ops.rms_norm_quant import fp8_e4m3fn_decode

    def value(name, out):
        if names[name] == "float8_e4m3fn":
            return fp8_e4m3fn_decode(out)
        return (from_storage(dtype, out) if names[name] == dtype else out).astype(np.float64)
    return tuple(value(n, o) for n, o in zip(op.outputs, outs))


def run_op(shim, op, dtype, inputs, attrs):
    suffix = STORAGE[dtype][1]
    stored = [to_storage(dtype, x) for x in inputs]
    if op.output_dtypes:
        return run_by_descriptor(shim, op, dtype, stored, attrs)
    y = np.empty_like(stored[0])
    if op is spec.SWISH:
        getattr(shim, f"swish_fwd_{suffix}")(ptr(stored[0]), ptr(y), ctypes.c_int64(y.size),
                                              ctypes.c_float(attrs.get("beta", 1.0)))
    elif op is spec.SWIGLU:
        y = np.empty(spec.output_shape(op, stored[0].shape), stored[0].dtype)
        d = y.shape[-1]
        getattr(shim, f"swiglu_fwd_{suffix}")(ptr(stored[0]), ptr(y), ctypes.c_int64(y.size // d if d else 0),
                                               ctypes.c_int64(d), ctypes.c_float(attrs.get("beta", 1.0)))
    elif op is spec.GEGLU:
        y = np.empty(spec.output_shape(op, stored[0].shape), stored[0].dtype)
        d = y.shape[-1]
        getattr(shim, f"geglu_fwd_{suffix}")(ptr(stored[0]), ptr(y), ctypes.c_int64(y.size // d if d else 0),
                                              ctypes.c_int64(d))
    elif op is spec.ADD_RMS_NORM:
        h = np.empty_like(stored[0])
        rows, cols = _rows_cols(stored[0])
        getattr(shim, f"add_rms_fwd_{suffix}")(*map(ptr, stored), ptr(y), ptr(h), ctypes.c_int64(rows),
                                                ctypes.c_int64(cols), ctypes.c_float(attrs.get("epsilon", 1e-6)))
        return from_storage(dtype, y), from_storage(dtype, h)
    else:
        rows, cols = _rows_cols(stored[0])
        getattr(shim, f"rms_fwd_{suffix}")(ptr(stored[0]), ptr(stored[1]), ptr(y),
                                            ctypes.c_int64(rows), ctypes.c_int64(cols),
                                            ctypes.c_float(attrs.get("epsilon", 1e-6)))
    return from_storage(dtype, y)


@pytest.mark.parametrize("dtype", list(STORAGE))
@pytest.mark.parametrize("op", spec.OPS.values(), ids=list(spec.OPS))
def test_forward_matches_reference(shim, op, dtype):
    for case in op.cases(dtype):
        got = run_op(shim, op, dtype, case.inputs, case.attrs)
        op.check_close(got, op.reference(*case.inputs, **case.attrs), dtype, case.inputs, case.name, case.attrs)


@pytest.mark.parametrize("dtype", list(STORAGE))
@pytest.mark.parametrize("n, offset", [(0, 0), (5, 3), (1000, 0), (10_007, 3), (10_007, 17)])
def test_streamed_stores_give_the_bits_of_cached_ones(shim, dtype, n, offset):
    """swish.out into a large reused buffer takes non-temporal stores (cpu.h): the same values, for
    a Y that starts mid cache line (offset elements past a 64-byte boundary) and any length, and
    nothing written outside Y."""
    x = to_storage(dtype, np.random.default_rng(3).uniform(-20, 20, n))
    x[: min(n, 4)] = to_storage(dtype, [np.nan, np.inf, -np.inf, 0.0][: min(n, 4)])
    suffix = STORAGE[dtype][1]
    room = np.zeros(n + offset + 64, x.dtype)
    base = (-room.ctypes.data % 64) // room.itemsize
    streamed = room[base + offset: base + offset + n]
    getattr(shim, f"swish_fwd_streamed_{suffix}")(ptr(x), ptr(streamed), ctypes.c_int64(n),
                                                  ctypes.c_float(1.25))
    cached = np.empty_like(x)
    getattr(shim, f"swish_fwd_{suffix}")(ptr(x), ptr(cached), ctypes.c_int64(n), ctypes.c_float(1.25))
    nan = np.isnan(from_storage(dtype, streamed)) & np.isnan(from_storage(dtype, cached))
    bits = np.dtype(f"u{x.itemsize}")
    assert np.array_equal(streamed.view(bits)[~nan], cached.view(bits)[~nan])  # NaN: any NaN
    assert nan.sum() == np.isnan(from_storage(dtype, cached)).sum()
    assert not room[: base + offset].any() and not room[base + offset + n:].any()


def numeric_grad(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[i] = eps
        g[i] = (f(x + d) - f(x - d)).sum() / (2 * eps)
    return g


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_backward_matches_finite_differences(shim, dtype):
    rng = np.random.default_rng(0)
    suffix = STORAGE[dtype][1]
    npdt = STORAGE[dtype][0]
    x = rng.standard_normal((3, 7))
    w = rng.uniform(0.5, 1.5, 7)
    dy = np.ones((3, 7))
    tol = 1e-6 if dtype == "float64" else 2e-3

    dx = np.empty((3, 7), npdt)
    shim[f"swish_bwd_{suffix}"](ptr(dy.astype(npdt)), ptr(x.astype(npdt)), ptr(dx),
                                ctypes.c_int64(21), ctypes.c_float(1.3))
    want = numeric_grad(lambda v: spec.SWISH.reference(v, beta=1.3), x)
    np.testing.assert_allclose(dx, want, rtol=tol, atol=tol)

    dx = np.empty((3, 7), npdt)
    dw = np.zeros(7)
    shim[f"rms_bwd_{suffix}"](ptr(dy.astype(npdt)), ptr(x.astype(npdt)), ptr(w.astype(npdt)),
                              ptr(dx), ptr(dw), ctypes.c_int64(3), ctypes.c_int64(7),
                              ctypes.c_float(1e-6))
    np.testing.assert_allclose(dx, numeric_grad(lambda v: spec.RMS_NORM.reference(v, w), x),
                               rtol=tol, atol=tol)
    np.testing.assert_allclose(dw, numeric_grad(lambda v: spec.RMS_NORM.reference(x, v), w),
                               rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_add_rms_norm_backward_matches_finite_differences(shim, dtype):
    """dX = dR is the gradient of sum(Y * dY + H * dH) through H = X + R; dW that of Y * dY."""
    rng = np.random.default_rng(4)
    suffix, npdt = STORAGE[dtype][1], STORAGE[dtype][0]
    x, r, dy, dh = (rng.standard_normal((3, 7)) for _ in range(4))
    w = rng.uniform(0.5, 1.5, 7)
    dx, dr, dw = np.empty((3, 7), npdt), np.empty((3, 7), npdt), np.zeros(7)
    shim[f"add_rms_bwd_{suffix}"](*(ptr(a.astype(npdt)) for a in (dy, dh, x, r, w)), ptr(dx), ptr(dr),
                                  ptr(dw), ctypes.c_int64(3), ctypes.c_int64(7), ctypes.c_float(1e-5))

    def loss(v, residual, weight):
        y, h = spec.ADD_RMS_NORM.reference(v, residual, weight, epsilon=1e-5)
        return y * dy + h * dh
    tol = 1e-6 if dtype == "float64" else 2e-3
    np.testing.assert_allclose(dx, numeric_grad(lambda v: loss(v, r, w), x), rtol=tol, atol=tol)
    np.testing.assert_array_equal(dr, dx)
    np.testing.assert_allclose(dw, numeric_grad(lambda v: loss(x, r, v), w), rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", list(STORAGE))
def test_add_rms_norm_writes_over_its_residual_in_place(shim, dtype):
    """H into R's own buffer (the residual stream updated in place, as serving engines call it) and
    Y into X's give what separate buffers give: each row is read before it is written."""
    case = next(c for c in spec.ADD_RMS_NORM.cases(dtype) if c.name == "large")
    x, r, w = (to_storage(dtype, a) for a in case.inputs)
    want_y, want_h = np.empty_like(x), np.empty_like(x)
    rows, cols = _rows_cols(x)
    args = (ctypes.c_int64(rows), ctypes.c_int64(cols), ctypes.c_float(1e-6))
    fwd = shim[f"add_rms_fwd_{STORAGE[dtype][1]}"]
    fwd(ptr(x), ptr(r), ptr(w), ptr(want_y), ptr(want_h), *args)
    fwd(ptr(x), ptr(r), ptr(w), ptr(x), ptr(r), *args)
    np.testing.assert_array_equal(x, want_y)
    np.testing.assert_array_equal(r, want_h)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_swiglu_backward_matches_finite_differences(shim, dtype):
    rng = np.random.default_rng(1)
    suffix, npdt = STORAGE[dtype][1], STORAGE[dtype][0]
    x = rng.standard_normal((3, 2 * 5))
    dy = rng.standard_normal((3, 5))
    dx = np.empty((3, 10), npdt)
    shim[f"swiglu_bwd_{suffix}"](ptr(dy.astype(npdt)), ptr(x.astype(npdt)), ptr(dx),
                                 ctypes.c_int64(3), ctypes.c_int64(5), ctypes.c_float(1.3))
    want = numeric_grad(lambda v: spec.SWIGLU.reference(v, beta=1.3) * dy, x)
    tol = 1e-6 if dtype == "float64" else 2e-3
    np.testing.assert_allclose(dx, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_geglu_backward_matches_finite_differences(shim, dtype):
    rng = np.random.default_rng(2)
    suffix, npdt = STORAGE[dtype][1], STORAGE[dtype][0]
    x = rng.standard_normal((3, 2 * 5)) * 2
    dy = rng.standard_normal((3, 5))
    dx = np.empty((3, 10), npdt)
    shim[f"geglu_bwd_{suffix}"](ptr(dy.astype(npdt)), ptr(x.astype(npdt)), ptr(dx),
                                ctypes.c_int64(3), ctypes.c_int64(5))
    want = numeric_grad(lambda v: spec.GEGLU.reference(v) * dy, x)
    tol = 1e-6 if dtype == "float64" else 2e-3
    np.testing.assert_allclose(dx, want, rtol=tol, atol=tol)


def test_geglu_backward_is_finite_where_the_gate_saturates(shim):
    """a^3 and a^2 overflow float32 beyond ~1e13 and ~2e19: the gate's slope is then 1 (a > 0) or
    0 (a < 0), never 0 * inf = NaN."""
    x = np.array([[1e13, -1e13, 1e20, -1e20, 1.0, 2.0, 3.0, 4.0]], np.float32)
    dx = np.empty_like(x)
    shim["geglu_bwd_f32"](ptr(np.ones((1, 4), np.float32)), ptr(x), ptr(dx), ctypes.c_int64(1), ctypes.c_int64(4))
    np.testing.assert_array_equal(dx[0, :4], [1.0, 0.0, 3.0, 0.0])
    np.testing.assert_array_equal(dx[0, 4:], [x[0, 0], -0.0, x[0, 2], -0.0])


# The float32 sigmoid (polynomial exp, one division) against the float64 reference on a dense
# sweep, in ulp of the float32 result where that is a normal number (|x| <= 85: exp flushes to 0
# below ln(FLT_MIN), which the tolerances' atol covers). Measured: Swish 2.8-3.2 ulp, SwiGLU 3.5 ulp
# (the spec's float32 rtol of 1e-5 is ~84 ulp); the budget catches a coarser exp or reciprocal.
SIGMOID_ULP_BUDGET = 4


def max_ulp_where_normal(got, want):
    normal = np.isfinite(want) & (np.abs(want) >= np.finfo(np.float32).tiny)
    return float(np.max(np.abs(got[normal] - want[normal]) / spec.ulp("float32", want[normal])))


# GeGLU's gate is a * sigmoid(2u), u cubic in a and computed in float32: u's rounding grows the
# result's relative error by |2u| (17 at a = -5, where the output falls below float32's atol and
# tanh has saturated). Measured at |a| <= 5: 34.8 ulp (11 at |a| <= 3); its budget catches what
# the sigmoid's would.
SWEEP_REACH = {"Swish": 85.0, "SwiGLU": 85.0, "GeGLU": 5.0}
ULP_BUDGET = {"Swish": SIGMOID_ULP_BUDGET, "SwiGLU": SIGMOID_ULP_BUDGET, "GeGLU": 40}


@pytest.mark.parametrize("op", [spec.SWISH, spec.SWIGLU, spec.GEGLU], ids=lambda o: o.name)
def test_float32_error_in_ulp_stays_within_budget(shim, op):
    reach = SWEEP_REACH[op.name]
    sweep = spec.round_to("float32", np.linspace(-reach, reach, 400001))
    x = sweep if op is spec.SWISH else np.concatenate([sweep, spec.round_to("float32", sweep / 7 + 0.5)])
    worst = max_ulp_where_normal(run_op(shim, op, "float32", (x,), {}), op.reference(x))
    print(f"opforge.{op.name} float32: max {worst:.2f} ulp vs the float64 reference")
    assert worst <= ULP_BUDGET[op.name]


def test_a_one_ulp_error_would_be_caught(shim):
    """The harness can fail: the kernel's output nudged by one ulp breaks the float64 tolerance."""
    case = spec.SWISH.cases("float64")[0]
    got = run_op(shim, spec.SWISH, "float64", case.inputs, case.attrs)
    with pytest.raises(AssertionError, match="outside"):
        spec.SWISH.check_close(np.nextafter(got, np.inf) * (1 + 1e-9),
                               spec.SWISH.reference(*case.inputs), "float64")


def find_tool(name):
    named = os.environ.get(f"OPFORGE_{name.upper()}", "")  # e.g. OPFORGE_CUOBJDUMP
    if named and Path(named).is_file():
        return named
    found = shutil.which(name)
    if found:
        return found
    for root in (Path("/usr/local/cuda/bin"),):
        if (root / name).exists():
            return str(root / name)
    return None


def test_cuda_kernels_compile_to_sass_and_ptx(tmp_path):
    nvcc = find_tool("nvcc")
    if nvcc is None:
        pytest.skip("no nvcc on this machine: CUDA kernels not compiled")
    src = HERE / "cuda_instances.cu"  # every launcher for float, half and bfloat16
    obj = tmp_path / "inst.o"
    subprocess.run([nvcc, "-std=c++17", "-O2", f"-I{spec.include_dir()}",
                    "-gencode", "arch=compute_80,code=sm_80",
                    "-gencode", "arch=compute_90,code=[sm_90,compute_90]",  # + PTX, as the libraries ship
                    "-DOPFORGE_CUDA_SASS_ARCHS=80_90", "-DOPFORGE_CUDA_PTX_ARCHS=90",
                    "-Xcompiler", "-Wall,-Werror", "-c", str(src), "-o", str(obj)], check=True)
    cuobjdump = find_tool("cuobjdump")
    if cuobjdump is None:
        pytest.skip("compiled; no cuobjdump to list the embedded SASS (pip nvidia-cuda-cuobjdump)")
    listing = subprocess.run([cuobjdump, "--list-elf", str(obj)], capture_output=True, text=True,
                             check=True).stdout
    assert "sm_80" in listing and "sm_90" in listing, listing
    ptx = subprocess.run([cuobjdump, "--list-ptx", str(obj)], capture_output=True, text=True, check=True).stdout
    assert ".sm_90.ptx" in ptx and ".sm_80.ptx" not in ptx, ptx


ATTR_VALUES = [1.0, 0.0, -0.0, -0.75, 1e-6, 1e-50, 1e38, 3.4028234663852886e38,
               spec.FLOAT32_OVERFLOW, np.nextafter(spec.FLOAT32_OVERFLOW, 0), 1e39, -1e39,
               1e300, -1.0, float("inf"), float("-inf"), float("nan"), -float("nan")]


OP_ATTRIBUTES = [(op, index, attr) for op in spec.OPS.values() for index, attr in enumerate(op.attributes.values())]


@pytest.mark.parametrize("value", ATTR_VALUES, ids=repr)
@pytest.mark.parametrize("op, index, attr", OP_ATTRIBUTES, ids=lambda a: getattr(a, "name", str(a)))
def test_attribute_rule_is_the_same_in_cpp_and_python(shim, op, index, attr, value):
    """attrs.h and opforge_spec agree on the verdict and on the message, byte for byte."""
    out = ctypes.create_string_buffer(256)
    shim.attr_error(op.name.encode(), ctypes.c_int(index), ctypes.c_double(value), out, ctypes.c_size_t(256))
    assert out.value.decode() == (attr.error(op.name, value) or "")
    with np.errstate(over="ignore"):
        finite32 = bool(np.isfinite(np.float32(value)))
    non_negative = attr.check is spec.RMS_NORM.attributes["epsilon"].check
    if attr.kind == "float":  # (an int or enum attribute's rule: test_generated.py's probe)
        assert (attr.error(op.name, value) is None) == (finite32 and (not non_negative or value >= 0))


# (numpy dtype name, ONNX TensorProto code): every code a layer may meet as W's type
W_DTYPES = {"float32": 1, "uint8": 2, "int8": 3, "int16": 5, "int32": 6, "int64": 7, "bool": 9,
            "float16": 10, "float64": 11, "bfloat16": 16}
WEIGHTED_OPS = [op for op in spec.OPS.values() if "W" in op.inputs]


@pytest.mark.parametrize("x_dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("op", WEIGHTED_OPS, ids=lambda op: op.name)
def test_weight_dtype_rule_is_the_same_in_cpp_and_python(shim, op, x_dtype):
    """shapes.h weight_dtype_error and OpSpec.w_dtype_error: the same verdict and words."""
    for w_dtype, code in W_DTYPES.items():
        out = ctypes.create_string_buffer(256)
        shim.weight_dtype_error(op.name.encode(), ctypes.c_int(W_DTYPES[x_dtype]), ctypes.c_int(code), out,
                                ctypes.c_size_t(256))
        assert out.value.decode() == (op.w_dtype_error(x_dtype, w_dtype) or ""), (x_dtype, w_dtype)
