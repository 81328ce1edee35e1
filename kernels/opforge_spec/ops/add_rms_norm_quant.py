"""opforge.AddRMSNormQuant: the residual add, then RMSNorm with dynamic per-token (per-row)
quantization of its output: vLLM's rms_norm_dynamic_per_token_quant called with a residual (the
fusion before a quantized GEMM in a decoder layer).

    H     = X + R, rounded to X's dtype                                X's dtype and shape
    Y     = RMSNorm(H, W), computed in float32 (float64 for float64 X)
    Scale = max(min(max|Y| over the row, scale_ub) / qmax, min_scale)   float32, shape [..., 1]
    Q     = saturate(round(Y / Scale))                                 int8 or float8 e4m3fn

Every step after H is RMSNormQuant's, with its rounding points, attributes (epsilon, quant_dtype,
scale_ub), NaN/Inf and tie rules (rms_norm_quant.py's docstring): Q and Scale are RMSNormQuant(H, W)
of the H returned, bit for bit. H may be written over R or X (the residual stream updated in place,
as vLLM updates its residual): each element of X and R is read before H's is written. No gradient.

Against vLLM with a residual (csrc/quantization/fused_kernels/layernorm_utils.cuh: compute_rms and
norm_and_quant add the residual in float32, write it back to `residual` as scalar_t, and quantize;
tests/kernels/quantization/test_rms_norm_dynamic_per_token_quant.py), the same: H = X + R written
over the residual, the per-row dynamic scale of RMSNorm(H) with RMSNormQuant's rules. Every
difference:
1. vLLM normalizes the float32 sum x + r (its residual output is that sum rounded to scalar_t, but
   the sum of squares, max|Y| and Q read the unrounded float32 sum); here H is rounded to X's dtype
   first and the rounded H is normalized, as AddRMSNorm does, so that Q and Scale are exactly
   RMSNormQuant of the H the caller gets back. Identical for float32 X; for float16/bfloat16 X the
   normalized values differ by H's rounding (half an ulp of X's dtype), which can move Q by one
   step near a rounding boundary and Scale by up to that relative amount.
2. The output H is its own tensor, which may be R itself (OpSpec.overwrites) or X; vLLM always
   writes it over `residual`.
3. Points 1-7 of rms_norm_quant.py's list (vLLM rounds X * rms to X's dtype before the weight
   multiply, float64 sums on the CPU, a row of zeros with epsilon 0 gives Q = 0, int8 saturates to
   [-127, 127], float8 NaN stays NaN, scale_ub an attribute, float64 X) hold here for the normalized
   H as for RMSNormQuant's X.

NaN/Inf: as RMSNormQuant's, of H: X + R = inf - inf is NaN, which makes H's row NaN in its mean
square (Q 0 for int8, NaN for float8; Scale = min_scale); H itself is X + R as IEEE adds it.

The decomposed form (standard ONNX, opsets 13..21): Add(X, R) in X's dtype, then RMSNormQuant's
decomposed form of that H (int8 only; a float8 quant_dtype is refused, decomposed_refusal).
"""
from __future__ import annotations

import numpy as np

from ..model import DTYPE_CODES, WEIGHT_EXPECTED, BadCase, Case, OpSpec, error
from .rms_norm import EPSILON
from .rms_norm_quant import (
    FP8_TIES,
    INT8_TIES,
    QUANT_DTYPE,
    QUANT_DTYPES,
    SCALE_UB,
    _exact_rms_row,
    _quant_name,
    rms_norm_quant_composed,
    rms_norm_quant_decomposed,
    rms_norm_quant_independent,
    rms_norm_quant_reference,
)


def add_rms_norm_quant_reference(x, r, w, epsilon: float, quant_dtype: float, scale_ub: float) -> tuple:
    h = x + r
    return (*rms_norm_quant_reference(h, w, epsilon, quant_dtype, scale_ub), h)


def add_rms_norm_quant_composed(x, r, w, epsilon: float = 1e-6, quant_dtype: int = 3, scale_ub: float = 0.0):
    """What a decoder writes without the fused op: the residual add in X's dtype, then
    RMSNormQuant's composed form of that H."""
    h = x + r
    return (*rms_norm_quant_composed(h, w, epsilon, quant_dtype, scale_ub), h)


def decomposed_refusal(attrs: dict) -> str | None:
    quant = _quant_name(attrs.get("quant_dtype", DTYPE_CODES["int8"]))
    if quant == "int8":
        return None
    return (f"AddRMSNormQuant's decomposed form writes int8 only, not {quant}: standard ONNX's Cast to "
            f"float8e4m3fn needs opset 19; the decomposed graphs are written for opsets 13..21")


def add_rms_norm_quant_decomposed(e, x, r, w, epsilon: float, quant_dtype: int = 3, scale_ub: float = 0.0):
    if decomposed_refusal({"quant_dtype": quant_dtype}) is not None:
        raise RuntimeError(error(
            "AddRMSNormQuant", "quant_dtype", "3 (int8) in the decomposed form (standard ONNX's Cast to "
            "float8e4m3fn needs opset 19; the decomposed graphs are written for opsets 13..21)",
            f"{int(quant_dtype)} ({_quant_name(quant_dtype)})"))
    h = e.op("Add", x, r)
    return (*rms_norm_quant_decomposed(e, h, w, epsilon, quant_dtype, scale_ub), h)


def add_rms_norm_quant_independent(x, r, w, epsilon: float, quant_dtype: float, scale_ub: float) -> tuple:
    """H by np.add in float64, then RMSNormQuant's independent formula of it."""
    h = np.add(r, x)
    return (*rms_norm_quant_independent(h, w, epsilon, quant_dtype, scale_ub), h)


def _cases(rng: np.random.Generator, dtype: str) -> list:
    def w(n):
        return rng.uniform(0.5, 1.5, (n,))

    def pair(shape, scale=1.0):
        return rng.standard_normal(shape) * scale, rng.standard_normal(shape) * scale

    int8, fp8 = {"quant_dtype": QUANT_DTYPES["int8"]}, {"quant_dtype": QUANT_DTYPES["float8_e4m3fn"]}
    cancels, residual = pair((5, 24))  # rows 1 and 3 of H = X + R are exact zeros
    residual[1], residual[3] = -cancels[1], -cancels[3]
    one_huge, huge_r = pair((3, 32))
    one_huge[1, 7] = 1e4 if dtype == "float16" else 1e6
    nan_x, nan_r = pair((4, 16))
    nan_x[1, 3] = np.nan
    nan_r[2, 0] = np.inf
    nan_r[3, 5], nan_x[3, 5] = np.inf, -np.inf  # inf + -inf: a NaN row
    huge_w = w(16)
    huge_w[2] = 6e4 if dtype == "float16" else 1e38
    cases = []
    for suffix, attrs in (("", int8), ("_fp8", fp8)):  # int8 cases by the shared names (random, ...)
        cases += [
            Case(f"random{suffix}", (*pair((4, 64)), w(64)), attrs),
            Case(f"rank1{suffix}", (*pair((64,)), w(64)), attrs),
            Case(f"rank3_odd{suffix}", (*pair((2, 3, 17)), w(17)), {"epsilon": 1e-5, **attrs}),
            Case(f"zero_rows{suffix}", (cancels, residual, w(24)), attrs),
            Case(f"zero_rows_eps0{suffix}", (cancels, residual, w(24)), {"epsilon": 0.0, **attrs}),
            Case(f"zero_residual{suffix}", (rng.standard_normal((3, 10)), np.zeros((3, 10)), w(10)), attrs),
            Case(f"one_huge{suffix}", (one_huge, huge_r, w(32)), attrs),
            Case(f"nan_inf{suffix}", (nan_x, nan_r, w(16)), attrs),
            Case(f"inf_weight{suffix}", (*pair((3, 16)), huge_w), attrs),
            Case(f"scale_ub{suffix}", (*pair((4, 32), 3.0), w(32)), {"scale_ub": 0.5, **attrs}),
            Case(f"empty_rows{suffix}", (np.zeros((0, 16)), np.zeros((0, 16)), w(16)), attrs),
            Case(f"empty_cols{suffix}", (np.zeros((3, 0)), np.zeros((3, 0)), w(0)), attrs),
            Case(f"large{suffix}", (*pair((64, 1031)), w(1031)), attrs),
            Case(f"non_contiguous{suffix}", (*pair((6, 40)), w(40)), attrs, non_contiguous=True),
        ]
    return cases + [
        Case("ties_int8", (*_tie_halves(INT8_TIES), np.ones(32)), {"epsilon": 0.0, **int8}),
        Case("ties_fp8", (*_tie_halves(FP8_TIES), np.ones(32)), {"epsilon": 0.0, **fp8}),
        Case("defaults", (*pair((2, 8)), w(8)), {}),
    ]


def _tie_halves(ties: list) -> tuple:
    """X and R each half of RMSNormQuant's exact tie rows (multiples of 0.25 up to 63.5, exact in
    every dtype): H = X + R is those rows exactly, so Y / Scale lands on the ties."""
    rows = np.stack([_exact_rms_row(ties, 32, 127.0), -_exact_rms_row(ties, 32, 127.0)])
    return rows / 2, rows / 2


def _bad_cases() -> list:
    x = np.ones((2, 4), np.float32)
    w = np.ones((4,), np.float32)
    op = "opforge.AddRMSNormQuant"
    return [
        BadCase("int64_input", (np.ones((2, 4), np.int64), np.ones((2, 4), np.int64), w), {}, (op, "X")),
        BadCase("rank0_input", (np.array(1.0, np.float32), np.array(1.0, np.float32), w), {}, (op, "X")),
        BadCase("residual_shape", (x, np.ones((2, 3), np.float32), w), {}, (op, "R")),
        BadCase("residual_broadcast", (x, np.ones((1, 4), np.float32), w), {}, (op, "R")),
        BadCase("weight_length", (x, x, np.ones((3,), np.float32)), {}, (op, "W")),
        BadCase("weight_rank2", (x, x, np.ones((1, 4), np.float32)), {}, (op, "W")),
        BadCase("weight_dtype", (x, x, np.ones((4,), np.float64)), {}, (op, "W", "dtype")),
        BadCase("quant_dtype_unknown", (x, x, w), {"quant_dtype": 5}, (op, "quant_dtype", "one of")),
        BadCase("negative_epsilon", (x, x, w), {"epsilon": -1.0}, (op, "epsilon")),
        BadCase("negative_scale_ub", (x, x, w), {"scale_ub": -1.0}, (op, "scale_ub")),
    ]


ADD_RMS_NORM_QUANT = OpSpec(
    name="AddRMSNormQuant",
    torch_name="add_rms_norm_quant",
    inputs=("X", "R", "W"),
    outputs=("Q", "Scale", "H"),
    attributes={"epsilon": EPSILON, "quant_dtype": QUANT_DTYPE, "scale_ub": SCALE_UB},
    reference_impl=add_rms_norm_quant_reference,
    # Scale and H against the reference's exact sum X + R: the kernels round H to X's dtype and
    # normalize that H (docstring, point 1), so H and Scale (float32 steps of the rounded H) are
    # within half an ulp of X's dtype of it: RMSNormQuant's 1e-6 for float32/float64, AddRMSNorm's
    # float16/bfloat16 bars (2^-11 and 2^-8 with the float32 steps' few ulps). Q: one quantization
    # step at most (check_close).
    tolerances={"float64": (1e-6, 0.0), "float32": (1e-6, 0.0), "float16": (2e-3, 1e-7),
                "bfloat16": (1.6e-2, 1e-7)},
    case_builder=_cases,
    bad_case_builder=_bad_cases,
    doc="H = X + R (in X's dtype); Y = RMSNorm(H, W) in float32; per row Scale = max(min(max|Y|, "
        "scale_ub) / qmax, min_scale) (float32, [..., 1]); Q = saturate(round_half_even(Y / Scale)) as "
        "int8 (qmax 127) or float8_e4m3fn (qmax 448), chosen by quant_dtype; R has X's shape; no gradient",
    layout="rows",
    extra={"w_expected": WEIGHT_EXPECTED},
    composed=add_rms_norm_quant_composed,
    decomposed=add_rms_norm_quant_decomposed,
    decomposed_refusal=decomposed_refusal,
    independent=add_rms_norm_quant_independent,
    # the serving engines' in-place residual update (h_out=residual), or over X; Q and Scale are
    # of their own dtypes
    overwrites={"H": ("X", "R")},
    order=70,
    output_dtypes={"Q": "quant_dtype", "Scale": "float32"},
    output_shapes={"Scale": "row"},
    has_gradient=False,
)
