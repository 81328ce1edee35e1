"""opforge.AddRMSNorm: its spec entry (references, forms, cases, tolerances)."""
from __future__ import annotations

import numpy as np

from ..model import WEIGHT_EXPECTED, BadCase, Case, OpSpec, StandardForm
from .rms_norm import (
    EPSILON,
    rms_norm_composed,
    rms_norm_decomposed,
    rms_norm_independent,
    rms_norm_reference,
)


def add_rms_norm_reference(x: np.ndarray, r: np.ndarray, w: np.ndarray, epsilon: float) -> tuple:
    h = x + r
    return rms_norm_reference(h, w, epsilon), h


def add_rms_norm_composed(x, r, w, epsilon: float = 1e-6):
    """What a decoder writes without the fused op: the residual add in X's dtype, then RMSNorm."""
    h = x + r
    return rms_norm_composed(h, w, epsilon), h


def add_rms_norm_decomposed(e, x, r, w, epsilon: float):
    h = e.op("Add", x, r)
    return rms_norm_decomposed(e, h, w, epsilon), h


def add_rms_norm_independent(x: np.ndarray, r: np.ndarray, w: np.ndarray, epsilon: float) -> tuple:
    h = np.add(r, x)
    return rms_norm_independent(h, w, epsilon), h


def _add_rms_norm_cases(rng: np.random.Generator, dtype: str) -> list:
    def w(n):
        return rng.uniform(0.5, 1.5, (n,))

    def pair(shape, scale=1.0):
        return rng.standard_normal(shape) * scale, rng.standard_normal(shape) * scale

    cancels = rng.standard_normal((5, 24))  # rows 1 and 3 of H = X + R are exact zeros
    residual = rng.standard_normal((5, 24))
    residual[1], residual[3] = -cancels[1], -cancels[3]
    nan_x, nan_r = pair((4, 16))
    nan_x[1, 3] = np.nan
    nan_r[2, 0] = np.inf
    nan_r[3, 5], nan_x[3, 5] = np.inf, -np.inf  # inf + -inf: a NaN row
    huge = 1e18 if dtype in ("float32", "float64", "bfloat16") else 1e4
    return [
        Case("random", (*pair((4, 64)), w(64)), {}),
        Case("rank1", (*pair((64,)), w(64)), {}),
        Case("rank3_odd", (*pair((2, 3, 17)), w(17)), {"epsilon": 1e-5}),
        Case("residual_cancels", (cancels, residual, w(24)), {}),
        Case("residual_cancels_eps0", (cancels, residual, w(24)), {"epsilon": 0.0}),
        Case("zero_residual", (rng.standard_normal((3, 10)), np.zeros((3, 10)), w(10)), {}),
        Case("huge_magnitude", (*pair((2, 16), huge), w(16)), {}),
        Case("nan_inf", (nan_x, nan_r, w(16)), {}),
        Case("empty_rows", (np.zeros((0, 16)), np.zeros((0, 16)), w(16)), {}),
        Case("batch1", (*pair((1, 4096)), w(4096)), {}),
        Case("large", (*pair((256, 1031)), w(1031)), {}),
        Case("non_contiguous", (*pair((6, 40)), w(40)), {}, non_contiguous=True),
    ]


def _add_rms_norm_bad_cases() -> list:
    x = np.ones((2, 4), np.float32)
    w = np.ones((4,), np.float32)
    return [
        BadCase("int64_input", (np.ones((2, 4), np.int64), np.ones((2, 4), np.int64), w), {},
                ("opforge.AddRMSNorm", "X")),
        BadCase("rank0_input", (np.array(1.0, np.float32), np.array(1.0, np.float32), w), {},
                ("opforge.AddRMSNorm", "X")),
        BadCase("residual_shape", (x, np.ones((2, 3), np.float32), w), {}, ("opforge.AddRMSNorm", "R")),
        BadCase("residual_broadcast", (x, np.ones((1, 4), np.float32), w), {}, ("opforge.AddRMSNorm", "R")),
        BadCase("weight_length", (x, x, np.ones((3,), np.float32)), {}, ("opforge.AddRMSNorm", "W")),
        BadCase("negative_epsilon", (x, x, w), {"epsilon": -1.0}, ("opforge.AddRMSNorm", "epsilon")),
        BadCase("epsilon_beyond_float32", (x, x, w), {"epsilon": 1e300}, ("opforge.AddRMSNorm", "epsilon")),
    ]


ADD_RMS_NORM = OpSpec(
    name="AddRMSNorm",
    torch_name="add_rms_norm",
    inputs=("X", "R", "W"),
    outputs=("Y", "H"),
    attributes={"epsilon": EPSILON},
    reference_impl=add_rms_norm_reference,
    # RMSNorm's bars, but float16 twice as wide: the kernels normalize H as stored (rounded to
    # X's dtype, so that Y = RMSNorm(H) of the H they return), the float64 reference the exact sum;
    # that rounding and Y's own can add up to 2^-10 in float16 (bfloat16's bar holds both).
    tolerances={"float64": (1e-10, 1e-12), "float32": (1e-4, 1e-5),
                "float16": (2e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5)},
    case_builder=_add_rms_norm_cases,
    bad_case_builder=_add_rms_norm_bad_cases,
    doc="H = X + R; Y = H / sqrt(mean(H^2, last axis) + epsilon) * W; rows of zeros give 0; "
        "R has X's shape",
    layout="rows",
    extra={"w_expected": WEIGHT_EXPECTED},
    composed=add_rms_norm_composed,
    decomposed=add_rms_norm_decomposed,
    independent=add_rms_norm_independent,
    # the serving engines' in-place residual update (y_out=x, h_out=residual), or the other way
    # round; never W, which every row reads
    overwrites={"Y": ("X", "R"), "H": ("X", "R")},
    order=50,  # its place in every table (OpSpec.order)
    standard=StandardForm("RMSNormalization", 23, after=("Add",)),
)
