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


def shape_id(shape) -> str:
    return "x".join(map(str, np.atleast_1d(shape)))


def shapes(op, max_elements=None) -> list:
    return [s for s in SHAPES[op.name] if max_elements is None or np.prod(s) <= max_elements]


def random_inputs(op, shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = spec.round_to(dtype, rng.standard_normal(shape))
    w = spec.round_to(dtype, rng.uniform(0.5, 1.5, np.shape(x)[-1])) if op is spec.RMS_NORM else None
    return x, w


def forward(kernels, op, dtype, x, w, attrs, view):
    return kernels.run(op.name, dtype, x, w, attr=next(iter(attrs.values()), None),
                       in_offset=VIEWS[view][0], out_offset=VIEWS[view][1])


def check_spec_cases(kernels, op, dtype, view):
    for case in op.cases(dtype):
        x, w = case.inputs[0], case.inputs[1] if len(case.inputs) > 1 else None
        got = forward(kernels, op, dtype, x, w, case.attrs, view)
        op.check_close(got, op.reference(*case.inputs, **case.attrs), dtype, case.inputs, case.name)


def check_launch_paths(kernels, op, dtype, view, max_elements=None):
    for shape in shapes(op, max_elements):
        x, w = random_inputs(op, shape, dtype)
        inputs = (x,) if w is None else (x, w)
        got = forward(kernels, op, dtype, x, w, {}, view)
        op.check_close(got, op.reference(*inputs), dtype, inputs, shape_id(shape))


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


def backward_reference(op, x, w, dy):
    """(dX, dW or None, the error scale of dX, that of dW), in float64."""
    x, dy = np.asarray(x, np.float64), np.asarray(dy, np.float64)
    w = None if w is None else np.asarray(w, np.float64)
    with np.errstate(all="ignore"):
        if op is spec.RMS_NORM:
            return rms_norm_grad(x, w, dy, 1e-6)
        gradients = {"Swish": lambda: swish_grad(x, dy, 1.0), "SwiGLU": lambda: swiglu_grad(x, dy, 1.0),
                     "GeGLU": lambda: geglu_grad(x, dy)}
        dx = gradients[op.name]()
        return dx, None, np.abs(dx), None


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
    """(label, X, W, dY): the launch-path shapes, and rows of zeros, with a NaN, and huge."""
    rng = np.random.default_rng(7)
    for shape in shapes(op, max_elements):
        x, w = random_inputs(op, shape, dtype, seed=1)
        dy_shape = spec.output_shape(op, np.shape(x))
        yield shape_id(shape), x, w, spec.round_to(dtype, rng.standard_normal(dy_shape))
    special = np.zeros((4, 16 * op.split))
    special[1] = rng.standard_normal(special.shape[-1])
    special[2, 3] = np.nan
    special[3] = rng.standard_normal(special.shape[-1]) * (1e2 if dtype == "float16" else 1e4)
    x = spec.round_to(dtype, special)
    w = spec.round_to(dtype, rng.uniform(0.5, 1.5, 16)) if op is spec.RMS_NORM else None
    yield "zero_nan_huge_rows", x, w, spec.round_to(dtype, np.ones(spec.output_shape(op, x.shape)))


def check_backward(kernels, op, dtype, view, max_elements=None):
    for label, x, w, dy in backward_cases(op, dtype, max_elements):
        got = kernels.run(op.name, dtype, x, w, dy, backward=True, in_offset=VIEWS[view][0],
                          out_offset=VIEWS[view][1])
        want_dx, want_dw, dx_scale, dw_scale = backward_reference(op, x, w, dy)
        if op is spec.RMS_NORM:
            got, got_dw = got
            assert_gradient_close(got_dw, want_dw, dw_scale, op, dtype, f"{label} dW")
        assert_gradient_close(got, want_dx, dx_scale, op, dtype, f"{label} dX")


def check_rms_norm_backward_of_no_rows(kernels):
    dx, dw = kernels.run("RMSNorm", "float32", np.zeros((0, 24)), np.ones(24), np.zeros((0, 24)),
                         backward=True)
    assert dx.shape == (0, 24) and (dw == 0).all()
