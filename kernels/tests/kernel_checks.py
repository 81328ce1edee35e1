"""Checks of the shared CUDA kernels' results, for any cuda_harness.Kernels (the GPU, or the CPU
emulation): forward against the spec's cases and float64 references on every launch path,
backward against float64 gradients, at aligned and unaligned views."""
from __future__ import annotations

import numpy as np

import opforge_spec as spec

DTYPES = ("float32", "float16", "bfloat16")
# (input offset, output offset) in elements past a 16-byte boundary: aligned; a view of a bigger
# tensor one element in, read into a new tensor; both one in (an .out into a view); both two in
# (the 4- and 8-byte packets of 16-bit types and floats)
VIEWS = {"aligned": (0, 0), "x_off_by_one": (1, 0), "all_off_by_one": (1, 1), "all_off_by_two": (2, 2)}
# Shapes that take each launch path: packets and scalar tails, rows several to a warp, one warp,
# one block, rows kept in registers or read twice, more rows than RMSNorm backward's 512 groups.
SHAPES = {
    "Swish": [(1,), (7,), (3, 4099), (1 << 20) + 3],
    "SwiGLU": [(3, 2), (5, 14), (4, 2048), (2, 2 * 4099), (1, 2 * 70_001), (300, 48)],
    "GeGLU": [(3, 2), (5, 14), (4, 2048), (2, 2 * 4099), (1, 2 * 70_001), (300, 48)],
    "RMSNorm": [(1, 1), (5, 3), (40, 8), (3, 1031), (2, 4096), (600, 64), (2, 16_384),
                (2, 16_388), (1, 70_001), (513, 40)],
}
SHAPES["AddRMSNorm"] = SHAPES["RMSNorm"]  # the same row kernels, with a residual
# Any other op: its launcher family's paths, those of the family's first op above.
FAMILY_SHAPES = {"elementwise": SHAPES["Swish"], "gated": SHAPES["SwiGLU"], "row_norm": SHAPES["RMSNorm"],
                 "residual_row_norm": SHAPES["RMSNorm"]}


def shape_id(shape) -> str:
    return "x".join(map(str, np.atleast_1d(shape)))


def shapes(op, max_elements=None) -> list:
    listed = SHAPES.get(op.name) or FAMILY_SHAPES[op.family]
    return [s for s in listed if max_elements is None or np.prod(s) <= max_elements]


def random_inputs(op, shape, dtype, seed=0) -> tuple:
    """The op's inputs in its spec's order: X (and R) standard normal, W in [0.5, 1.5]."""
    rng = np.random.default_rng(seed)
    x = spec.round_to(dtype, rng.standard_normal(shape))
    w = spec.round_to(dtype, rng.uniform(0.5, 1.5, np.shape(x)[-1]))
    by_name = {"X": x, "W": w}
    if "R" in op.inputs:
        by_name["R"] = spec.round_to(dtype, rng.standard_normal(shape))
    return tuple(by_name[name] for name in op.inputs)


def by_role(op, inputs) -> dict:
    """The harness's keywords for the op's inputs: x, and w / r where it has them."""
    named = dict(zip(op.inputs, inputs))
    return {"x": named["X"], "w": named.get("W"), "r": named.get("R")}


def forward(kernels, op, dtype, inputs, attrs, view):
    return kernels.run(op.name, dtype, **by_role(op, inputs), attr=next(iter(attrs.values()), None),
                       in_offset=VIEWS[view][0], out_offset=VIEWS[view][1])


def check_spec_cases(kernels, op, dtype, view):
    for case in op.cases(dtype):
        got = forward(kernels, op, dtype, case.inputs, case.attrs, view)
        op.check_close(got, op.reference(*case.inputs, **case.attrs), dtype, case.inputs, case.name)


def check_launch_paths(kernels, op, dtype, view, max_elements=None):
    for shape in shapes(op, max_elements):
        inputs = random_inputs(op, shape, dtype)
        got = forward(kernels, op, dtype, inputs, {}, view)
        op.check_close(got, op.reference(*inputs), dtype, inputs, shape_id(shape))



# ---- a float32 W beside a 16-bit X (a mixed-dtype call) ---------------------------------------

def float32_weight_inputs(op, shape, dtype, seed=0) -> dict:
    """X (and R) in `dtype`, W float32 values that `dtype` cannot hold (uniform in [0.5, 1.5])."""
    rng = np.random.default_rng(seed)
    inputs = {"x": spec.round_to(dtype, rng.standard_normal(shape)),
              "w": spec.round_to("float32", rng.uniform(0.5, 1.5, shape[-1]))}
    if "R" in op.inputs:
        inputs["r"] = spec.round_to(dtype, rng.standard_normal(shape))
    return inputs


def first_output(values):
    return values[0] if isinstance(values, tuple) else values


def check_float32_weight(kernels, op, dtype, max_elements=None):
    """Y of a mixed call is the float64 reference with W as given, rounded to X's dtype: equal for
    nearly every element (the float32 row sums may round a few apart), where W rounded to X's
    dtype first (what a layer that cast W would compute) is off for many more."""
    for shape in shapes(op, max_elements):
        inputs = float32_weight_inputs(op, shape, dtype)
        x, w, r = inputs["x"], inputs["w"], inputs.get("r")
        args = (x, w) if r is None else (x, r, w)
        if r is not None:  # the kernels normalize H rounded to X's dtype
            args = (spec.round_to(dtype, x + r), np.zeros_like(x), w)
        want = spec.round_to(dtype, first_output(op.reference(*args)))
        got = first_output(kernels.run(op.name, dtype, **inputs, w_float32=True))
        label = f"opforge.{op.name} {shape_id(shape)} {dtype} X, float32 W"
        errors = spec.measure(got, first_output(op.reference(*args)), dtype, *op.tolerance(dtype))
        assert errors.mismatched == 0, f"{label}: {errors.mismatched} element(s) beyond the tolerance"
        same = np.mean(got == want)
        assert same >= 0.98, f"{label}: {same:.1%} of Y equal the float32-W reference"
        if x.size >= 1024:  # enough elements for the rounded-W contrast to show
            cast = spec.round_to(dtype, first_output(op.reference(*args[:-1], spec.round_to(dtype, w))))
            assert np.mean(cast == want) < same, f"{label}: rounding W to {dtype} would not show here"

# ---- backward: float64 references of the gradients ---------------------------------------

def sigmoid(t):
    e = np.exp(-np.abs(t))
    return np.where(t >= 0, 1.0, e) / (1.0 + e)


def swish_grad(x, dy, beta):
    s = sigmoid(beta * x)
    return dy * (s + beta * x * s * (1.0 - s))


def swiglu_grad(x, dy, beta):
    d = x.shape[-1] // 2
    a, b = x[..., :d], x[..., d:]
    return np.concatenate([swish_grad(a, dy * b, beta), dy * a * sigmoid(beta * a)], axis=-1)


def geglu_grad(x, dy):
    """dA = dY * B * gelu_tanh'(A), dB = dY * gelu_tanh(A), with gelu_tanh(a) = a * sigmoid(2u)."""
    d = x.shape[-1] // 2
    a, b = x[..., :d], x[..., d:]
    k, c = 2 * spec.SQRT_2_OVER_PI, spec.GELU_CUBIC
    s = sigmoid(k * (a + c * a**3))
    spread = s * (1.0 - s)
    slope = s + np.where(spread == 0, 0.0, spread * a * k * (1 + 3 * c * a * a))
    return np.concatenate([dy * b * slope, dy * a * s], axis=-1)


def rms_norm_grad(x, w, dy, eps):
    """dX, dW and the magnitudes they are differences or sums of (their error scales)."""
    denom = np.mean(x * x, axis=-1, keepdims=True) + eps
    inv = np.where(denom == 0, 0.0, 1.0 / np.sqrt(np.where(denom == 0, 1.0, denom)))
    dot = np.mean(dy * w * x, axis=-1, keepdims=True)
    direct, through_inv = inv * dy * w, x * inv**3 * dot
    per_row = (dy * x * inv).reshape(-1, x.shape[-1])
    dx_scale = np.maximum(np.abs(direct), np.abs(through_inv))
    return direct - through_inv, per_row.sum(axis=0), dx_scale, np.abs(per_row).sum(axis=0)


def add_rms_norm_grad(x, r, w, dy, dh, eps, dtype):
    """RMSNorm's gradients at H = X + R as the kernels store it (rounded to dtype), dH added to dX."""
    h = np.asarray(spec.round_to(dtype, x + r), np.float64)
    dx, dw, dx_scale, dw_scale = rms_norm_grad(h, w, dy, eps)
    return dx + dh, dw, np.maximum(dx_scale, np.abs(dh)), dw_scale


def numeric_grad(op, x, dy):
    """dX of an elementwise or gated op from its float64 reference (its defaults), by central
    differences, for an op without a hand-written gradient here. Each Y element depends on one
    element of each part of X, so moving a whole part at once gives every derivative (~1e-10
    relative error)."""
    step = 1e-6 * np.maximum(1.0, np.abs(x))
    if op.split == 1:
        return dy * (op.reference(x + step) - op.reference(x - step)) / (2 * step)
    d = x.shape[-1] // 2
    part = np.arange(x.shape[-1]) < d
    grads = []
    for in_a in (True, False):  # dA = dY * dY/dA, dB = dY * dY/dB
        shift = np.broadcast_to(part == in_a, x.shape).astype(np.float64)
        scaled = step * shift
        moved = scaled[..., :d] if in_a else scaled[..., d:]
        slope = (op.reference(x + scaled) - op.reference(x - scaled)) / (2 * moved)
        grads.append(dy * slope)
    return np.concatenate(grads, axis=-1)


def first_attribute(op, fallback: float) -> float:
    """The op's first attribute's default as the kernels take it (rounded to float32)."""
    return float(np.float32(next(iter(op.defaults().values()), fallback)))


def backward_reference(op, x, w, dy, r=None, dh=None, dtype="float64"):
    """(dX, dW or None, the error scale of dX, that of dW), in float64; dR is dX. An op of a family
    without a formula here: the row families' (their functor's inverse is an inverse square root,
    cuda.cuh), numeric derivatives of the reference for the others."""
    x, dy = np.asarray(x, np.float64), np.asarray(dy, np.float64)
    w = None if w is None else np.asarray(w, np.float64)
    with np.errstate(all="ignore"):
        if op.family == "residual_row_norm":
            return add_rms_norm_grad(x, np.asarray(r, np.float64), w, dy, np.asarray(dh, np.float64),
                                     first_attribute(op, 1e-6), dtype)
        if op.family == "row_norm":
            return rms_norm_grad(x, w, dy, first_attribute(op, 1e-6))
        gradients = {"Swish": lambda: swish_grad(x, dy, 1.0), "SwiGLU": lambda: swiglu_grad(x, dy, 1.0),
                     "GeGLU": lambda: geglu_grad(x, dy)}
        dx = gradients[op.name]() if has_exact_gradient(op) else numeric_grad(op, x, dy)
        return dx, None, np.abs(dx), None


def has_exact_gradient(op) -> bool:
    """Whether backward_reference writes the op's gradient out (else: central differences, whose
    error is up to ~1e-6 relative where the reference has a kink, |x| at 0)."""
    return op.family in ("row_norm", "residual_row_norm") or op.name in ("Swish", "SwiGLU", "GeGLU")


def assert_gradient_close(got, want, scale, op, dtype, label):
    """Within the op's rtol of each value's error scale (the magnitude of what it was computed
    from: RMSNorm's dX is a difference, dW a sum) plus rtol of the largest scale; NaN where the
    reference has NaN; exact zeros where everything it came from is zero."""
    rtol, _ = op.tolerance(dtype)
    nan = np.isnan(want)
    assert (np.isnan(got) == nan).all(), f"{label}: NaN at other places"
    scale = scale[~nan]
    largest = scale.max(initial=0.0)
    error = np.abs(got[~nan] - want[~nan])
    bad = error > rtol * (scale + largest)
    assert not bad.any(), f"{label}: {bad.sum()} outside, worst {error.max():.3g} (scale {largest:.3g})"


def backward_cases(op, dtype, max_elements=None):
    """(label, inputs by role (x, w, r), dY, dH or None): the launch-path shapes, and rows of
    zeros, with a NaN, and huge."""
    rng = np.random.default_rng(7)
    residual = "R" in op.inputs

    def grads(shape, make):
        dy = spec.round_to(dtype, make(spec.output_shape(op, shape)))
        return dy, (spec.round_to(dtype, make(shape)) if residual else None)
    for shape in shapes(op, max_elements):
        inputs = by_role(op, random_inputs(op, shape, dtype, seed=1))
        yield (shape_id(shape), inputs, *grads(np.shape(inputs["x"]), rng.standard_normal))
    special = np.zeros((4, 16 * op.split))
    special[1] = rng.standard_normal(special.shape[-1])
    special[2, 3] = np.nan
    special[3] = rng.standard_normal(special.shape[-1]) * (1e2 if dtype == "float16" else 1e4)
    x = spec.round_to(dtype, special)
    inputs = {"x": x, "w": spec.round_to(dtype, rng.uniform(0.5, 1.5, 16)) if "W" in op.inputs else None,
              "r": np.zeros_like(x) if residual else None}
    yield ("zero_nan_huge_rows", inputs, *grads(x.shape, np.ones))


def check_backward(kernels, op, dtype, view, max_elements=None):
    for label, inputs, dy, dh in backward_cases(op, dtype, max_elements):
        got = kernels.run(op.name, dtype, inputs["x"], inputs["w"], dy, backward=True, r=inputs["r"], dh=dh,
                          in_offset=VIEWS[view][0], out_offset=VIEWS[view][1])
        want_dx, want_dw, dx_scale, dw_scale = backward_reference(op, inputs["x"], inputs["w"], dy,
                                                                  inputs["r"], dh, dtype)
        if want_dw is not None:
            got, got_dw = got[0], got[1:]
            if inputs["r"] is not None:
                got_dw, got_dr = got_dw
                np.testing.assert_array_equal(got_dr, got, err_msg=f"{label}: dR is not dX")
            else:
                got_dw = got_dw[0]
            assert_gradient_close(got_dw, want_dw, dw_scale, op, dtype, f"{label} dW")
        assert_gradient_close(got, want_dx, dx_scale, op, dtype, f"{label} dX")


def check_rms_norm_backward_of_no_rows(kernels):
    dx, dw = kernels.run("RMSNorm", "float32", np.zeros((0, 24)), np.ones(24), np.zeros((0, 24)),
                         backward=True)
    assert dx.shape == (0, 24) and (dw == 0).all()
    none = np.zeros((0, 24))
    dx, dw, dr = kernels.run("AddRMSNorm", "float32", none, np.ones(24), none, backward=True, r=none, dh=none)
    assert dx.shape == dr.shape == (0, 24) and (dw == 0).all()
