"""opforge.RMSNorm: its spec entry (references, forms, cases, tolerances)."""
from __future__ import annotations

import numpy as np

from ..model import WEIGHT_EXPECTED, Attr, BadCase, Case, OpSpec, StandardForm, _finite_non_negative


def rms_norm_reference(x: np.ndarray, w: np.ndarray, epsilon: float) -> np.ndarray:
    if x.shape[-1] == 0:
        return np.zeros(x.shape)
    denom = np.mean(x * x, axis=-1, keepdims=True) + epsilon
    inv = np.where(denom == 0, 0.0, 1.0 / np.sqrt(np.where(denom == 0, 1.0, denom)))
    return x * inv * w


def rms_norm_composed(x, w, epsilon: float = 1e-6):
    """In float64 for float64, else in float32 (as RMSNorm is usually written); rows of zeros
    give 0, as the spec asks, and so do its derivatives: rsqrt only sees the rows whose
    denominator is not 0 (its gradient at 0 is inf, and inf * 0 = NaN)."""
    xa = x if x.dtype.itemsize == 8 else x.float()
    wa = w.to(xa.dtype)
    denom = xa.pow(2).mean(dim=-1, keepdim=True) + epsilon
    zero = denom == 0
    inv = denom.masked_fill(zero, 1.0).rsqrt().masked_fill(zero, 0.0)
    return (xa * inv * wa).to(x.dtype)


def rms_norm_decomposed(e, x, w, epsilon: float):
    mean = e.reduce_mean(e.op("Pow", x, e.scalar(2.0, x)), [-1])
    shifted = e.op("Add", mean, e.scalar(epsilon, x))
    if epsilon == 0.0:  # keep rows of zeros exact (0/0 otherwise); only subnormal rows differ
        shifted = e.op("Max", shifted, e.tiny(x))
    return e.op("Mul", e.op("Div", x, e.op("Sqrt", shifted)), w)


def rms_norm_independent(x: np.ndarray, w: np.ndarray, epsilon: float) -> np.ndarray:
    if x.shape[-1] == 0:
        return np.zeros_like(x)
    denom = np.mean(np.square(x), axis=-1, keepdims=True) + epsilon
    return np.where(denom == 0.0, 0.0, x / np.sqrt(denom)) * w


def _rms_norm_cases(rng: np.random.Generator, dtype: str) -> list:
    def w(n):
        return rng.uniform(0.5, 1.5, (n,))

    zero_rows = rng.standard_normal((5, 24))
    zero_rows[1] = 0.0
    zero_rows[3] = 0.0
    nan_rows = rng.standard_normal((4, 16))
    nan_rows[1, 3] = np.nan
    nan_rows[2, 0] = np.inf
    huge = 1e18 if dtype in ("float32", "float64", "bfloat16") else 1e4
    return [
        Case("random", (rng.standard_normal((4, 64)), w(64)), {}),
        Case("rank1", (rng.standard_normal((64,)), w(64)), {}),
        Case("rank3_odd", (rng.standard_normal((2, 3, 17)), w(17)), {"epsilon": 1e-5}),
        Case("rank4", (rng.standard_normal((2, 2, 3, 8)), w(8)), {}),
        Case("zero_rows", (zero_rows, w(24)), {}),
        Case("zero_rows_eps0", (zero_rows, w(24)), {"epsilon": 0.0}),
        Case("large_eps", (rng.standard_normal((3, 10)) * 1e-2, w(10)), {"epsilon": 1e-2}),
        Case("huge_pm_1e4", (rng.choice([-1e4, 1e4], (3, 32)), w(32)), {}),
        Case("huge_magnitude", (rng.standard_normal((2, 16)) * huge, w(16)), {}),
        Case("nan_inf", (nan_rows, w(16)), {}),
        Case("empty_rows", (np.zeros((0, 16)), w(16)), {}),
        Case("empty_batch", (np.zeros((2, 0, 16)), w(16)), {}),
        Case("batch1", (rng.standard_normal((1, 4096)), w(4096)), {}),
        Case("large", (rng.standard_normal((256, 1031)), w(1031)), {}),
        Case("non_contiguous", (rng.standard_normal((6, 40)), w(40)), {}, non_contiguous=True),
    ]


def _rms_norm_bad_cases() -> list:
    x = np.ones((2, 4), np.float32)
    w = np.ones((4,), np.float32)
    return [
        BadCase("int64_input", (np.ones((2, 4), np.int64), w), {}, ("opforge.RMSNorm", "X")),
        BadCase("rank0_input", (np.array(1.0, np.float32), w), {}, ("opforge.RMSNorm", "X")),
        BadCase("weight_length", (x, np.ones((3,), np.float32)), {}, ("opforge.RMSNorm", "W")),
        BadCase("weight_rank", (x, np.ones((1, 4), np.float32)), {}, ("opforge.RMSNorm", "W")),
        BadCase("negative_epsilon", (x, w), {"epsilon": -1.0}, ("opforge.RMSNorm", "epsilon")),
        BadCase("epsilon_beyond_float32", (x, w), {"epsilon": 1e300}, ("opforge.RMSNorm", "epsilon")),
    ]


EPSILON = Attr("epsilon", 1e-6, "added to the mean square", _finite_non_negative)  # and AddRMSNorm's


RMS_NORM = OpSpec(
    name="RMSNorm",
    torch_name="rms_norm",
    inputs=("X", "W"),
    attributes={"epsilon": EPSILON},
    reference_impl=rms_norm_reference,
    # fp32 looser than torch's default: the row reduction runs in a different order (and on the GPU
    # in float32) than the float64 reference; bar set by the issue.
    tolerances={"float64": (1e-10, 1e-12), "float32": (1e-4, 1e-5),
                "float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5)},
    case_builder=_rms_norm_cases,
    bad_case_builder=_rms_norm_bad_cases,
    doc="Y = X / sqrt(mean(X^2, last axis) + epsilon) * W; rows of zeros give 0",
    layout="rows",
    extra={"w_expected": WEIGHT_EXPECTED},  # around X's last dim
    composed=rms_norm_composed,
    decomposed=rms_norm_decomposed,
    independent=rms_norm_independent,
    overwrites={"Y": ("X",)},
    order=20,  # its place in every table (OpSpec.order)
    standard=StandardForm("RMSNormalization", 23),
)
