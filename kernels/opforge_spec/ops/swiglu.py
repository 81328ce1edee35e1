"""opforge.SwiGLU: its spec entry (references, forms, cases, tolerances)."""
from __future__ import annotations

import numpy as np

from ..model import BadCase, Case, OpSpec, StandardForm
from .swish import BETA, SWISH, beta_bad_cases, swish_decomposed, swish_reference


def swiglu_reference(x: np.ndarray, beta: float) -> np.ndarray:
    d = x.shape[-1] // 2
    return swish_reference(x[..., :d], beta) * x[..., d:]


def swiglu_composed(x, beta: float = 1.0):
    a, b = x.chunk(2, dim=-1)
    return a * (beta * a).sigmoid() * b


def _halves(e, x) -> tuple:
    """A = X[..., :d], B = X[..., d:] for a last dim 2d known only at run time."""
    last = e.op("Gather", e.op("Shape", x), e.ints([-1]), axis=0)
    half = e.op("Div", last, e.ints([2]))
    a = e.op("Slice", x, e.ints([0]), half, e.ints([-1]))
    b = e.op("Slice", x, half, e.ints([2**62]), e.ints([-1]))
    return a, b


def swiglu_decomposed(e, x, beta: float):
    a, b = _halves(e, x)
    return e.op("Mul", swish_decomposed(e, a, beta), b)


def swiglu_independent(x: np.ndarray, beta: float) -> np.ndarray:
    a, b = np.split(x, 2, axis=-1)
    return a / (1.0 + np.exp(-beta * a)) * b


# What every gated op (X = [A, B] along the last axis) shares: X's rule, its special values and
# the X inputs it must refuse.
GATED_X_EXPECTED = "a tensor of rank >= 1 whose last dim is even and >= 2"
GATED_SPECIAL = np.array([np.nan, 1.0, -np.nan, np.inf, -np.inf, -2.0, 0.0, 3.0])


def gated_pairs(a, b) -> np.ndarray:
    """X = [A, B] along the last axis."""
    return np.concatenate([np.asarray(a, np.float64), np.asarray(b, np.float64)], axis=-1)


def gated_bad_x_cases(op_name: str) -> list:
    op = f"opforge.{op_name}"
    return [
        BadCase("int64_input", (np.ones((2, 4), np.int64),), {}, (op, "X")),
        BadCase("odd_last_dim", (np.ones((2, 5), np.float32),), {}, (op, "X", "even")),
        BadCase("rank0_input", (np.array(1.0, np.float32),), {}, (op, "X", "rank")),
    ]


def _swiglu_cases(rng: np.random.Generator, dtype: str) -> list:
    pairs, special = gated_pairs, GATED_SPECIAL
    return [
        Case("random", (rng.standard_normal((4, 2 * 37)),), {}),
        Case("default_beta", (rng.standard_normal((3, 2 * 5)),), {}),
        Case("rank1", (rng.standard_normal((2 * 64,)),), {}),
        Case("beta_1.7_odd_d", (rng.standard_normal((2, 3, 2 * 11)),), {"beta": 1.7}),
        Case("beta_negative", (rng.standard_normal((5, 2 * 16)),), {"beta": -0.75}),
        Case("beta_zero", (rng.standard_normal((5, 2 * 7)),), {"beta": 0.0}),
        Case("d_1", (rng.standard_normal((6, 2)),), {}),
        Case("wide_range", (pairs(rng.uniform(-80.0, 80.0, (3, 33)), rng.uniform(-4, 4, (3, 33))),), {}),
        Case("huge_pm_1e4", (pairs([1e4, -1e4, 9999.0, -9999.0], [1.0, 2.0, -1.0, 0.5]),), {}),
        Case("huge_beta", (pairs([1e-3, -1e-3, 1.0, -1.0], [2.0, 2.0, 2.0, 2.0]),), {"beta": 1e4}),
        Case("nan_inf", (pairs(special, special[::-1]),), {}),
        Case("empty", (np.zeros((0, 2 * 5)),), {}),
        Case("batch1", (rng.standard_normal((1, 2 * 64)),), {}),
        Case("large_odd_d", (rng.standard_normal((64, 2 * 2049)),), {}),
        Case("non_contiguous", (rng.standard_normal((8, 2 * 33)),), {}, non_contiguous=True),
    ]


def _swiglu_bad_cases() -> list:
    return [*gated_bad_x_cases("SwiGLU"), *beta_bad_cases("SwiGLU", np.ones((2, 4), np.float32))]


SWIGLU = OpSpec(
    name="SwiGLU",
    torch_name="swiglu",
    inputs=("X",),
    attributes={"beta": BETA},
    reference_impl=swiglu_reference,
    # Swish's bars: the gate's product with B adds one rounding, well inside them.
    tolerances=dict(SWISH.tolerances),
    case_builder=_swiglu_cases,
    bad_case_builder=_swiglu_bad_cases,
    doc="Y = A * sigmoid(beta * A) * B with A = X[..., :d], B = X[..., d:]; X [..., 2d] -> Y [..., d]",
    extra={"x_expected": GATED_X_EXPECTED},
    layout="rows",
    split=2,
    composed=swiglu_composed,
    decomposed=swiglu_decomposed,
    independent=swiglu_independent,
    order=30,  # its place in every table (OpSpec.order)
    standard=StandardForm("SwiGLU", 28),
)
