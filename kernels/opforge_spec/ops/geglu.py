"""opforge.GeGLU: its spec entry (references, forms, cases, tolerances)."""
from __future__ import annotations

import numpy as np

from ..model import Case, OpSpec
from .swiglu import GATED_SPECIAL, GATED_X_EXPECTED, _halves, gated_bad_x_cases, gated_pairs
from .swish import SWISH

SQRT_2_OVER_PI = 0.7978845608028654  # sqrt(2 / pi): torch's gelu(approximate="tanh") constant
GELU_CUBIC = 0.044715


def _gelu_tanh_inner(a: np.ndarray) -> np.ndarray:
    """u = sqrt(2/pi) * (a + 0.044715 * a^3)"""
    return SQRT_2_OVER_PI * (a + GELU_CUBIC * a**3)


def gelu_tanh_reference(a: np.ndarray) -> np.ndarray:
    """0.5 * a * (1 + tanh(u)) written as a * sigmoid(2u), the same value without the cancellation
    in 1 + tanh(u) for negative a; the sigmoid never overflows, so a large |a| (a^3 beyond float64
    included) gives a or -0, as tanh's saturation does."""
    t = 2.0 * _gelu_tanh_inner(a)
    e = np.exp(-np.abs(t))
    r = 1.0 / (1.0 + e)
    return a * np.where(t >= 0, r, e * r)


def geglu_reference(x: np.ndarray) -> np.ndarray:
    d = x.shape[-1] // 2
    return gelu_tanh_reference(x[..., :d]) * x[..., d:]


def geglu_composed(x):
    import torch.nn.functional as F  # torch's own tanh GELU; the spec imports no torch at load time

    a, b = x.chunk(2, dim=-1)
    return F.gelu(a, approximate="tanh") * b


def geglu_decomposed(e, x):
    """0.5 * A * (1 + Tanh(sqrt(2/pi) * (A + 0.044715 * A*A*A))) * B."""
    a, b = _halves(e, x)
    cube = e.op("Mul", e.op("Mul", a, a), a)
    inner = e.op("Mul", e.op("Add", a, e.op("Mul", cube, e.scalar(GELU_CUBIC, a))),
                 e.scalar(SQRT_2_OVER_PI, a))
    gate = e.op("Mul", e.op("Mul", a, e.scalar(0.5, a)), e.op("Add", e.op("Tanh", inner), e.scalar(1.0, a)))
    return e.op("Mul", gate, b)


def geglu_independent(x: np.ndarray) -> np.ndarray:
    a, b = np.split(x, 2, axis=-1)
    return 0.5 * a * (1.0 + np.tanh(SQRT_2_OVER_PI * (a + GELU_CUBIC * a * a * a))) * b


def _geglu_cases(rng: np.random.Generator, dtype: str) -> list:
    pairs, special = gated_pairs, GATED_SPECIAL
    # tanh saturates from |u| ~ 9 (|a| ~ 5); a^3 overflows float32 beyond ~7e12 (float16's max: 65504)
    huge = 6e4 if dtype == "float16" else 1e13
    saturated = [5.5, -5.5, 30.0, -30.0, 1e4, -1e4, huge, -huge]
    return [
        Case("random", (rng.standard_normal((4, 2 * 37)),), {}),
        Case("rank1", (rng.standard_normal((2 * 64,)),), {}),
        Case("rank3_odd_d", (rng.standard_normal((2, 3, 2 * 11)),), {}),
        Case("d_1", (rng.standard_normal((6, 2)),), {}),
        Case("wide_range", (pairs(rng.uniform(-80.0, 80.0, (3, 33)), rng.uniform(-4, 4, (3, 33))),), {}),
        Case("tanh_saturates", (pairs(saturated, [1.0, 2.0, -1.0, 0.5, 1.0, -2.0, 1.0, 3.0]),), {}),
        Case("nan_inf", (pairs(special, special[::-1]),), {}),
        Case("empty", (np.zeros((0, 2 * 5)),), {}),
        Case("batch1", (rng.standard_normal((1, 2 * 64)),), {}),
        Case("large_odd_d", (rng.standard_normal((64, 2 * 2049)),), {}),
        Case("non_contiguous", (rng.standard_normal((8, 2 * 33)),), {}, non_contiguous=True),
    ]


def _geglu_bad_cases() -> list:
    return gated_bad_x_cases("GeGLU")


GEGLU = OpSpec(
    name="GeGLU",
    torch_name="geglu",
    inputs=("X",),
    attributes={},
    reference_impl=geglu_reference,
    # Swish's bars: the kernels compute the gate as a * sigmoid(2u) with the same sigmoid (u's
    # cube and scale add two roundings), and the product with B one more, well inside them.
    tolerances=dict(SWISH.tolerances),
    case_builder=_geglu_cases,
    bad_case_builder=_geglu_bad_cases,
    doc="Y = gelu_tanh(A) * B with A = X[..., :d], B = X[..., d:], gelu_tanh(a) = 0.5 * a * "
        "(1 + tanh(sqrt(2/pi) * (a + 0.044715 * a^3))); X [..., 2d] -> Y [..., d]",
    extra={"x_expected": GATED_X_EXPECTED},
    layout="rows",
    split=2,
    composed=geglu_composed,
    decomposed=geglu_decomposed,
    independent=geglu_independent,
    order=40,  # its place in every table (OpSpec.order)
)
