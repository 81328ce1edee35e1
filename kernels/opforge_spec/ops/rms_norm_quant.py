"""opforge.RMSNormQuant: RMSNorm with dynamic per-token (per-row) quantization of its output, the
fusion serving engines run before a quantized GEMM (vLLM's rms_norm_dynamic_per_token_quant).

    Y     = RMSNorm(X, W), computed in float32 (float64 for float64 X)
    Scale = max(min(max|Y| over the row, scale_ub) / qmax, min_scale)   float32, shape [..., 1]
    Q     = saturate(round(Y / Scale))                                 int8 or float8 e4m3fn

quant_dtype picks Q's dtype (its values are ONNX TensorProto codes, as Cast's `to`): int8 (3, qmax
127) or float8_e4m3fn (17, qmax 448). The op has no gradient (an inference op).

The rounding points, in the order the kernels compute (the reference follows them exactly):
- the row's inverse root mean square as RMSNorm's kernels compute it: the sum of squares in
  float64, inv = float32(1 / sqrt(sum / cols + epsilon)); a row whose mean square + epsilon is 0
  gets inv = 0 (Y = 0, not NaN);
- Y = float32(float32(X * inv) * W): X * inv rounded to float32, then the weight multiply;
- amax = the largest |Y| of the row, NaN ignored (fmax); with scale_ub > 0, min(amax, scale_ub);
- Scale = max(float32(amax / qmax), min_scale), min_scale = FLT_EPSILON (2^-23) for int8 and
  float32(1 / (448 * 512)) for float8;
- int8: Q = clamp(round_half_even(float32(Y * float32(1 / Scale))), -127, 127), NaN -> 0;
- float8: Q = to_e4m3fn(clamp(float32(Y / Scale), -448, 448)), round half to even, NaN -> NaN.

Against vLLM (csrc/quantization/fused_kernels/layernorm_utils.cuh, quant_conversions.cuh, and
tests/kernels/quantization/test_rms_norm_dynamic_per_token_quant.py), the same: the per-row
dynamic scale, qmax 127 / 448, min_scaling_factor (FLT_EPSILON for int8, 1/(448*512) for fp8),
scale_ub bounding the row's amax before the division, int8 through the inverted scale
(Y * (1/Scale)) and fp8 through a division (Y / Scale, "for an exact match with FBGemm"),
round-half-even (cvt.rni / nearbyint; fp8 conversion rounds to nearest even), amax by fmaxf
(NaN ignored), fp8 clamped to +-448 before the conversion. Every difference:
1. vLLM rounds X * rms to X's dtype and multiplies by W in X's dtype
   (static_cast<scalar_t>(x * rms) * weight[i]); here Y stays float32 (one rounding less for
   float16/bfloat16 X, identical for float32 X): Q quantizes the float32 RMSNorm.
2. vLLM sums the squares in float32; here in float64 (the RMSNorm kernels'; on CUDA float32 as
   vLLM). The inverse is rounded to float32 either way.
3. A row of zeros with epsilon = 0: vLLM's rsqrtf(0) = inf gives NaN; here inv = 0, Y = 0,
   Scale = min_scale, Q = 0.
4. int8 saturates to [-127, 127] (symmetric: Q * Scale stays within the row's bound); vLLM's
   cvt.rni.sat.s8 saturates to [-128, 127], which differs only where scale_ub clips (Y / Scale
   < -127.5).
5. float8 NaN: vLLM's fmin/fmax clamp turns a NaN into +448; here Q is NaN (e4m3fn has NaN).
   int8 NaN: 0 in both (cvt.rni.sat gives 0).
6. scale_ub is a float attribute (0: none, the default) instead of an optional tensor.
7. float64 X (vLLM has none): computed in float64, Scale rounded to float32.
8. No residual input. The op model takes tensor inputs by position (X[, R][, W]) and a fixed
   list of outputs, so vLLM's optional residual (H = X + R written over R, Y = RMSNorm(H)) is a
   second op, AddRMSNormQuant (add_rms_norm_quant.py: X, R, W -> Q, Scale, H; H may be written
   over R), not an optional input of this one: its kernels round H to X's dtype and normalize
   that H, as AddRMSNorm does (vLLM normalizes the unrounded float32 sum; its docstring lists
   the differences).

NaN/Inf: a NaN in a row makes its mean square NaN, so the whole row's Y is NaN: amax (NaN
ignored) is 0, Scale = min_scale, Q = 0 (int8) or NaN (float8). An Inf in X makes the mean square
inf and inv = 0: Y is 0 where X is finite, NaN where it is infinite (0 * inf); Scale = min_scale.
An Inf in Y (a huge weight) makes Scale inf: Y / Scale is 0 for the finite values, NaN for the
infinite ones (int8 0, float8 NaN).

Ties: Y / Scale exactly at k + 0.5 rounds to the even neighbour (63.5 -> 64, 2.5 -> 2, -0.5 -> -0;
float8 17 -> 16, 19 -> 20). The reference computes the same float32 quotients, so Q matches it
exactly; a kernel whose float32 steps round apart from these (CUDA's float32 sums and rsqrtf; the
float64 kernels against this float32 reference) can land one quantization step away where the
quotient is within a few float32 ulps of a rounding boundary: the tests allow one step there only
(near_tie_mask).

The decomposed form (standard ONNX, opsets 13..21) supports int8 only: Cast to float8e4m3fn needs
opset 19 and the dynamo exporter writes its decompositions for opset 18; it computes RMSNorm in
X's dtype (rms_norm_decomposed), the row's amax by ReduceMax(|Y| with NaN as 0: ReduceMax
propagates a NaN, fmax does not), Scale = Max(amax / 127, min_scale) (Min with scale_ub first), and
Q = Cast(Clip(NaN as 0 of Round(Y * (1 / Scale))), -127, 127), int8) (ONNX leaves Cast of NaN to
int8 undefined; the kernels give 0). A float8 quant_dtype is refused there (decomposed_refusal).
"""
from __future__ import annotations

import functools

import numpy as np

from ..model import (
    DTYPE_CODES,
    WEIGHT_EXPECTED,
    Attr,
    BadCase,
    Case,
    OpSpec,
    _finite_non_negative,
    enum_attr,
    error,
)
from .rms_norm import EPSILON, rms_norm_decomposed

QUANT_DTYPES = {name: DTYPE_CODES[name] for name in ("int8", "float8_e4m3fn")}
QMAX = {"int8": 127.0, "float8_e4m3fn": 448.0}
MIN_SCALE = {"int8": float(np.finfo(np.float32).eps),
             "float8_e4m3fn": float(np.float32(1.0) / np.float32(448.0 * 512.0))}
FP8_MIN_NORMAL = 2.0**-6  # e4m3fn: exponent bias 7, 3 mantissa bits, subnormal spacing 2^-9

QUANT_DTYPE = enum_attr("quant_dtype", QUANT_DTYPES, "int8",
                        "Q's dtype: 3 int8 (qmax 127), 17 float8_e4m3fn (qmax 448)")
SCALE_UB = Attr("scale_ub", 0.0, "upper bound on the row's max|Y| before the division (0: none)",
                _finite_non_negative)


def _f32(values) -> np.ndarray:
    """Values rounded to float32, held as float64."""
    return np.asarray(values, dtype=np.float64).astype(np.float32).astype(np.float64)


def _quant_name(quant_dtype) -> str:
    return {v: k for k, v in QUANT_DTYPES.items()}[int(quant_dtype)]


def _row_inverse(x: np.ndarray, epsilon: float) -> np.ndarray:
    """float32(1 / sqrt(mean(X^2) + epsilon)) per row, the mean in float64; 0 where that is 0."""
    if x.shape[-1] == 0:
        return np.zeros(x.shape[:-1] + (1,))
    denom = np.mean(x * x, axis=-1, keepdims=True) + epsilon
    return _f32(np.where(denom == 0, 0.0, 1.0 / np.sqrt(np.where(denom == 0, 1.0, denom))))


def _row_scale(y: np.ndarray, quant: str, scale_ub: float) -> np.ndarray:
    """max(float32(min(max|Y|, scale_ub) / qmax), min_scale) per row; NaN ignored."""
    amax = np.fmax.reduce(np.abs(y), axis=-1, keepdims=True, initial=0.0)
    if scale_ub > 0:
        amax = np.minimum(amax, scale_ub)
    return np.maximum(_f32(amax / QMAX[quant]), MIN_SCALE[quant])


def fp8_e4m3fn_round(v: np.ndarray) -> np.ndarray:
    """The float8 e4m3fn value nearest to each of `v` (|v| <= 448), ties to even; NaN stays."""
    a = np.abs(v)
    with np.errstate(divide="ignore", invalid="ignore"):
        binade = np.floor(np.log2(np.where(a >= FP8_MIN_NORMAL, a, 1.0)))
    step = np.where(a >= FP8_MIN_NORMAL, np.exp2(binade - 3.0), 2.0**-9)
    return np.copysign(np.rint(a / step) * step, v)


def quantize(y: np.ndarray, scale: np.ndarray, quant: str) -> np.ndarray:
    """Q from float32 Y and Scale, as the kernels round (module docstring)."""
    if quant == "int8":
        q = np.rint(_f32(y * _f32(1.0 / scale)))
        return np.where(np.isnan(q), 0.0, np.clip(q, -QMAX[quant], QMAX[quant]))
    return fp8_e4m3fn_round(np.clip(_f32(y / scale), -QMAX[quant], QMAX[quant]))


def rms_norm_quant_reference(x, w, epsilon: float, quant_dtype: float, scale_ub: float) -> tuple:
    quant = _quant_name(quant_dtype)
    y = _f32(_f32(x * _row_inverse(x, epsilon)) * w)
    scale = _row_scale(y, quant, scale_ub)
    return quantize(y, scale, quant), scale


def quotient(x, w, epsilon: float = 1e-6, quant_dtype: float = 3, scale_ub: float = 0.0) -> np.ndarray:
    """Y / Scale before rounding, as the reference computes it (for near_tie_mask)."""
    quant = _quant_name(quant_dtype)
    y = _f32(_f32(x * _row_inverse(x, epsilon)) * w)
    scale = _row_scale(y, quant, scale_ub)
    return _f32(y * _f32(1.0 / scale)) if quant == "int8" else _f32(y / scale)


def near_tie_mask(quotients: np.ndarray, quant: str, ulps: float = 8.0) -> np.ndarray:
    """Where a quotient lies within `ulps` float32 ulps of a rounding boundary (a .5 for int8, a
    midpoint between float8 neighbours): there two correct float32 kernels may round apart."""
    a = np.abs(np.asarray(quotients, dtype=np.float64))
    if quant == "int8":
        boundary = np.floor(a) + 0.5
    else:
        below = fp8_e4m3fn_round(np.minimum(a, 448.0))
        step = np.where(below >= FP8_MIN_NORMAL, np.exp2(np.floor(np.log2(np.maximum(below, 1e-30))) - 3.0),
                        2.0**-9)
        boundary = np.where(below <= a, below + step / 2, below - step / 2)
    with np.errstate(invalid="ignore"):
        return np.abs(a - boundary) <= ulps * np.spacing(np.float32(np.nan_to_num(a))).astype(np.float64)


def rms_norm_quant_composed(x, w, epsilon: float = 1e-6, quant_dtype: int = 3, scale_ub: float = 0.0):
    """The op in torch tensor methods: rms_norm in float32, amax, divide, round, clamp, cast (what
    the benchmarks time and opforge-align compares with)."""
    import torch  # only here: the spec itself does not need torch

    quant = _quant_name(quant_dtype)
    xa = x if x.dtype == torch.float64 else x.float()
    denom = xa.pow(2).mean(dim=-1, keepdim=True) + epsilon
    inv = denom.masked_fill(denom == 0, 1.0).rsqrt().masked_fill(denom == 0, 0.0)
    y = (xa * inv * w.to(xa.dtype)).float()
    magnitudes = y.abs().nan_to_num(nan=0.0)
    # a row without columns: amax 0, as the kernels' and the reference's (amax() refuses an empty dim)
    amax = magnitudes.amax(dim=-1, keepdim=True) if y.shape[-1] else y.new_zeros((*y.shape[:-1], 1))
    if scale_ub > 0:
        amax = amax.clamp(max=scale_ub)
    scale = (amax / QMAX[quant]).clamp(min=MIN_SCALE[quant])
    if quant == "int8":
        q = (y * scale.reciprocal()).round().clamp(-127.0, 127.0).nan_to_num(nan=0.0)
        return q.to(torch.int8), scale
    return (y / scale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn), scale


def decomposed_refusal(attrs: dict) -> str | None:
    quant = _quant_name(attrs.get("quant_dtype", DTYPE_CODES["int8"]))
    if quant == "int8":
        return None
    return (f"RMSNormQuant's decomposed form writes int8 only, not {quant}: standard ONNX's Cast to "
            f"float8e4m3fn needs opset 19; the decomposed graphs are written for opsets 13..21")


def _zero_nan(e, t):
    """NaN -> 0 (Where(IsNaN)): ReduceMax propagates a NaN where the kernels' fmax ignores it, and
    ONNX leaves Cast of NaN to int8 undefined where the kernels give 0."""
    return e.op("Where", e.op("IsNaN", t), e.scalar(0.0, t), t)


def rms_norm_quant_decomposed(e, x, w, epsilon: float, quant_dtype: int = 3, scale_ub: float = 0.0):
    refusal = decomposed_refusal({"quant_dtype": quant_dtype})
    if refusal is not None:
        raise RuntimeError(error(
            "RMSNormQuant", "quant_dtype", "3 (int8) in the decomposed form (standard ONNX's Cast to "
            "float8e4m3fn needs opset 19; the decomposed graphs are written for opsets 13..21)",
            f"{int(quant_dtype)} ({_quant_name(quant_dtype)})"))
    y = e.op("Cast", rms_norm_decomposed(e, x, w, epsilon), to=1)
    amax = e.reduce_max(_zero_nan(e, e.op("Abs", y)), [-1])
    if scale_ub > 0:
        amax = e.op("Min", amax, e.scalar(scale_ub, y))
    scale = e.op("Max", e.op("Div", amax, e.scalar(QMAX["int8"], y)), e.scalar(MIN_SCALE["int8"], y))
    rounded = _zero_nan(e, e.op("Round", e.op("Mul", y, e.op("Reciprocal", scale))))
    clipped = e.op("Clip", rounded, e.scalar(-QMAX["int8"], y), e.scalar(QMAX["int8"], y))
    return e.op("Cast", clipped, to=DTYPE_CODES["int8"]), scale


@functools.cache
def _fp8_table() -> np.ndarray:
    """Every non-negative finite float8 e4m3fn value, ascending (decoded from its bits)."""
    bits = np.arange(0x7F)  # 0x7F is NaN
    exponent, mantissa = bits >> 3, bits & 7
    return np.where(exponent == 0, mantissa * 2.0**-9, (1 + mantissa / 8.0) * np.exp2(exponent - 7.0))


def fp8_e4m3fn_decode(bits) -> np.ndarray:
    """float8 e4m3fn values (float64) from their bits (uint8; 0x7f and 0xff are NaN): numpy has no
    float8, so a layer reading Q as bytes decodes it here."""
    bits = np.asarray(bits, dtype=np.uint8)
    magnitude = np.append(_fp8_table(), np.nan)[bits & 0x7F]
    return np.where(bits & 0x80, -magnitude, magnitude)


def _nearest_fp8(v: np.ndarray) -> np.ndarray:
    """Nearest e4m3fn value by table lookup, ties to the even code (the independent rounding)."""
    table = _fp8_table()
    a = np.abs(v)
    hi = np.clip(np.searchsorted(table, np.nan_to_num(a)), 1, len(table) - 1)
    lo = hi - 1
    d_lo, d_hi = a - table[lo], table[hi] - a
    pick = np.where(d_lo < d_hi, lo, np.where(d_hi < d_lo, hi, np.where(lo % 2 == 0, lo, hi)))
    return np.where(np.isnan(v), np.nan, np.copysign(table[pick], v))


def rms_norm_quant_independent(x, w, epsilon: float, quant_dtype: float, scale_ub: float) -> tuple:
    """In float64 throughout: Y = X / sqrt(mean(X^2) + epsilon) * W, the scale from nanmax, Q by
    np.round (int8) or a lookup of the float8 values (float8)."""
    quant = _quant_name(quant_dtype)
    if x.shape[-1] == 0:
        return np.zeros(x.shape), np.full(x.shape[:-1] + (1,), MIN_SCALE[quant])
    denom = np.mean(np.square(x), axis=-1, keepdims=True) + epsilon
    y = np.where(denom == 0.0, 0.0, x / np.sqrt(denom)) * w
    finite_abs = np.where(np.isnan(y), 0.0, np.abs(y))
    amax = finite_abs.max(axis=-1, keepdims=True)
    bound = np.minimum(amax, scale_ub) if scale_ub > 0 else amax
    scale = np.maximum(bound / QMAX[quant], MIN_SCALE[quant])
    if quant == "int8":
        return np.nan_to_num(np.clip(np.round(y / scale), -127, 127), nan=0.0), scale
    return _nearest_fp8(np.clip(y / scale, -448, 448)), scale


def _exact_rms_row(values: list, cols: int, limit: float) -> np.ndarray:
    """A row holding `values` (multiples of 0.5), padded with multiples of 0.5 of magnitude <=
    `limit` so that its mean square is 4^k exactly: with epsilon 0 and W = 1 the row's inverse,
    Y and Scale are exact, and Y / Scale lands exactly on the values' ties."""
    quarters = round(sum(4 * v * v for v in values))  # sum of squares in units of 0.25
    target = cols
    while target * 4 < quarters + 4:
        target *= 4
    rest, fill = target * 4 - quarters, []
    for _ in range(cols - len(values) - 4):  # greedy while far from the target, four squares last
        step = min(int(np.sqrt(max(rest - 3 * (2 * limit) ** 2, 0))), int(2 * limit))
        fill.append(step)
        rest -= step * step
    return np.array(values + [f / 2 for f in fill] + [f / 2 for f in _four_squares(rest, int(2 * limit))])


def _four_squares(n: int, bound: int) -> list:
    for a in range(min(bound, int(np.sqrt(n))), -1, -1):
        for b in range(min(a, int(np.sqrt(n - a * a))), -1, -1):
            for c in range(min(b, int(np.sqrt(n - a * a - b * b))), -1, -1):
                d = round(float(np.sqrt(n - a * a - b * b - c * c)))
                if a * a + b * b + c * c + d * d == n and d <= bound:
                    return [a, b, c, d]
    raise ValueError(f"opforge_spec: no four squares for {n}")


INT8_TIES = [127.0, 63.5, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5, -126.5, 100.5, -99.5]
FP8_TIES = [448.0, 17.0, 19.0, -17.0, 9.5, 10.5, 0.5625, 1.0625, -240.0, 208.0, 232.0, 0.01171875]


def _cases(rng: np.random.Generator, dtype: str) -> list:
    def w(n):
        return rng.uniform(0.5, 1.5, (n,))

    int8, fp8 = {"quant_dtype": QUANT_DTYPES["int8"]}, {"quant_dtype": QUANT_DTYPES["float8_e4m3fn"]}
    zero_rows = rng.standard_normal((5, 24))
    zero_rows[1] = 0.0
    zero_rows[3] = 0.0
    one_huge = rng.standard_normal((3, 32))
    one_huge[1, 7] = 1e4 if dtype == "float16" else 1e6
    nan_rows = rng.standard_normal((4, 16))
    nan_rows[1, 3] = np.nan
    nan_rows[2, 0] = np.inf
    huge_w = w(16)
    huge_w[2] = 6e4 if dtype == "float16" else 1e38
    cases = []
    for suffix, attrs in (("", int8), ("_fp8", fp8)):  # int8 cases by the shared names (random, ...)
        cases += [
            Case(f"random{suffix}", (rng.standard_normal((4, 64)), w(64)), attrs),
            Case(f"rank1{suffix}", (rng.standard_normal((64,)), w(64)), attrs),
            Case(f"rank3_odd{suffix}", (rng.standard_normal((2, 3, 17)), w(17)), {"epsilon": 1e-5, **attrs}),
            Case(f"zero_rows{suffix}", (zero_rows, w(24)), attrs),
            Case(f"zero_rows_eps0{suffix}", (zero_rows, w(24)), {"epsilon": 0.0, **attrs}),
            Case(f"one_huge{suffix}", (one_huge, w(32)), attrs),
            Case(f"nan_inf{suffix}", (nan_rows, w(16)), attrs),
            Case(f"inf_weight{suffix}", (rng.standard_normal((3, 16)), huge_w), attrs),
            Case(f"scale_ub{suffix}", (rng.standard_normal((4, 32)) * 3, w(32)), {"scale_ub": 0.5, **attrs}),
            Case(f"empty_rows{suffix}", (np.zeros((0, 16)), w(16)), attrs),
            Case(f"empty_cols{suffix}", (np.zeros((3, 0)), w(0)), attrs),
            Case(f"large{suffix}", (rng.standard_normal((64, 1031)), w(1031)), attrs),
            Case(f"non_contiguous{suffix}", (rng.standard_normal((6, 40)), w(40)), attrs, non_contiguous=True),
        ]
    ties_int8 = np.stack([_exact_rms_row(INT8_TIES, 32, 127.0), -_exact_rms_row(INT8_TIES, 32, 127.0)])
    ties_fp8 = np.stack([_exact_rms_row(FP8_TIES, 32, 127.0), -_exact_rms_row(FP8_TIES, 32, 127.0)])
    return cases + [
        Case("ties_int8", (ties_int8, np.ones(32)), {"epsilon": 0.0, **int8}),
        Case("ties_fp8", (ties_fp8, np.ones(32)), {"epsilon": 0.0, **fp8}),
        Case("defaults", (rng.standard_normal((2, 8)), w(8)), {}),
    ]


def _bad_cases() -> list:
    x = np.ones((2, 4), np.float32)
    w = np.ones((4,), np.float32)
    op = "opforge.RMSNormQuant"
    return [
        BadCase("int64_input", (np.ones((2, 4), np.int64), w), {}, (op, "X")),
        BadCase("rank0_input", (np.array(1.0, np.float32), w), {}, (op, "X")),
        BadCase("weight_length", (x, np.ones((3,), np.float32)), {}, (op, "W")),
        BadCase("weight_rank2", (x, np.ones((1, 4), np.float32)), {}, (op, "W")),
        BadCase("weight_dtype", (x, np.ones((4,), np.float64)), {}, (op, "W", "dtype")),
        BadCase("quant_dtype_unknown", (x, w), {"quant_dtype": 5}, (op, "quant_dtype", "one of")),
        BadCase("negative_epsilon", (x, w), {"epsilon": -1.0}, (op, "epsilon")),
        BadCase("negative_scale_ub", (x, w), {"scale_ub": -1.0}, (op, "scale_ub")),
    ]


RMS_NORM_QUANT = OpSpec(
    name="RMSNormQuant",
    torch_name="rms_norm_quant",
    inputs=("X", "W"),
    outputs=("Q", "Scale"),
    attributes={"epsilon": EPSILON, "quant_dtype": QUANT_DTYPE, "scale_ub": SCALE_UB},
    reference_impl=rms_norm_quant_reference,
    # Scale (float32) against the reference's float32 steps, by X's dtype: the CPU kernels compute
    # the same float32 values for float32/bfloat16 X (measured: equal; the sums' order aside, 1
    # ulp), float64 X in float64 (within 1 float32 ulp); CUDA sums in float32 and takes rsqrtf (2
    # ulp), hence 1e-6 (8 ulp) for every dtype. Q: one quantization step at most (check_close;
    # test_rms_norm_quant.py holds the CPU to the reference exactly but near ties).
    tolerances={"float64": (1e-6, 0.0), "float32": (1e-6, 0.0), "float16": (1e-6, 0.0), "bfloat16": (1e-6, 0.0)},
    case_builder=_cases,
    bad_case_builder=_bad_cases,
    doc="Y = RMSNorm(X, W) in float32; per row Scale = max(min(max|Y|, scale_ub) / qmax, min_scale) "
        "(float32, [..., 1]); Q = saturate(round_half_even(Y / Scale)) as int8 (qmax 127) or "
        "float8_e4m3fn (qmax 448), chosen by quant_dtype; no gradient",
    layout="rows",
    extra={"w_expected": WEIGHT_EXPECTED},
    composed=rms_norm_quant_composed,
    decomposed=rms_norm_quant_decomposed,
    decomposed_refusal=decomposed_refusal,
    independent=rms_norm_quant_independent,
    order=60,
    output_dtypes={"Q": "quant_dtype", "Scale": "float32"},
    output_shapes={"Scale": "row"},
    has_gradient=False,
)
