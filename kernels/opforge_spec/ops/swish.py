"""opforge.Swish: its spec entry (references, forms, cases, tolerances)."""
from __future__ import annotations

import numpy as np

from ..model import Attr, BadCase, Case, OpSpec, StandardForm, _finite


def swish_reference(x: np.ndarray, beta: float) -> np.ndarray:
    t = beta * x
    e = np.exp(-np.abs(t))  # never overflows: same formulation as kernels/math.h
    r = 1.0 / (1.0 + e)
    return x * np.where(t >= 0, r, e * r)


def swish_composed(x, beta: float = 1.0):
    return x * (beta * x).sigmoid()


def swish_decomposed(e, x, beta: float):
    scaled = x if beta == 1.0 else e.op("Mul", x, e.scalar(beta, x))
    return e.op("Mul", x, e.op("Sigmoid", scaled))


def swish_independent(x: np.ndarray, beta: float) -> np.ndarray:
    return x / (1.0 + np.exp(-beta * x))  # exp overflow -> x/inf = 0: the right limit


def _swish_cases(rng: np.random.Generator, dtype: str) -> list:
    tiny = float(np.finfo(np.float16).smallest_subnormal) if dtype == "float16" else 1e-40
    return [
        Case("random", (rng.standard_normal((4, 37)),), {}),
        Case("default_beta", (rng.standard_normal((3, 5)),), {}),
        Case("beta_1.7", (rng.standard_normal((2, 3, 11)),), {"beta": 1.7}),
        Case("beta_negative", (rng.standard_normal((64,)),), {"beta": -0.75}),
        Case("beta_zero", (rng.standard_normal((5, 7)),), {"beta": 0.0}),
        Case("wide_range", (rng.uniform(-80.0, 80.0, (257,)),), {}),
        Case("huge_pm_1e4", (np.array([1e4, -1e4, 9999.0, -9999.0, 0.0, -0.0, 1.0, -1.0]),), {}),
        Case("huge_beta", (np.array([1e-3, -1e-3, 1.0, -1.0]),), {"beta": 1e4}),
        Case("nan_inf", (np.array([np.nan, 1.0, -np.nan, np.inf, -np.inf, -2.0, 0.0]),), {}),
        Case("denormal", (np.array([tiny, -tiny, 4 * tiny, 0.0]),), {}),
        Case("empty", (np.zeros((0, 5)),), {}),
        Case("rank0", (np.array(0.5),), {}),
        Case("batch1", (rng.standard_normal((1, 64)),), {}),
        Case("large", (rng.standard_normal((64, 4099)),), {}),
        Case("non_contiguous", (rng.standard_normal((8, 33)),), {}, non_contiguous=True),
    ]


BETA = Attr("beta", 1.0, "slope inside the sigmoid", _finite)   # Swish's and SwiGLU's


def beta_bad_cases(op_name: str, x: np.ndarray) -> list:
    """The beta values every op with BETA refuses, naming the op and beta."""
    return [
        BadCase("nan_beta", (x,), {"beta": float("nan")}, (f"opforge.{op_name}", "beta")),
        BadCase("inf_beta", (x,), {"beta": float("-inf")}, (f"opforge.{op_name}", "beta")),
        # finite as a double, inf as the float32 every kernel computes with
        BadCase("beta_beyond_float32", (x,), {"beta": 1e39}, (f"opforge.{op_name}", "beta")),
    ]


def _swish_bad_cases() -> list:
    return [
        BadCase("int64_input", (np.ones((2, 3), np.int64),), {}, ("opforge.Swish", "X")),
        *beta_bad_cases("Swish", np.ones((2, 3), np.float32)),
    ]


SWISH = OpSpec(
    name="Swish",
    torch_name="swish",
    inputs=("X",),
    attributes={"beta": BETA},
    reference_impl=swish_reference,
    # fp32: the bar (looser rtol than torch's 1.3e-6: one rounding of exp plus the product,
    # tighter atol); half types: torch.testing defaults (output rounding dominates).
    tolerances={"float64": (1e-12, 1e-15), "float32": (1e-5, 1e-6),
                "float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5)},
    case_builder=_swish_cases,
    bad_case_builder=_swish_bad_cases,
    doc="Y = X * sigmoid(beta * X), elementwise, any shape",
    composed=swish_composed,
    decomposed=swish_decomposed,
    independent=swish_independent,
    overwrites={"Y": ("X",)},
    order=10,  # its place in every table (OpSpec.order)
    standard=StandardForm("Swish", 24),
)
