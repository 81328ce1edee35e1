"""The comparison of one tensor with its expected value: errors in absolute, relative and ULP
terms, the worst element, and the verdict under a tolerance.

An element passes when |actual - expected| <= atol + rtol * (|expected| + scale), scale being the
root mean square of the tensor's finite expected values: a sum that cancels (MatMul, Add, x - mean)
leaves elements near zero whose error is set by the operands, not by the result, so the tensor's
magnitude bounds them. NaN must sit where the expected tensor has NaN and infinities must match
the expected value rounded to the judged dtype (1e39 is inf in float32). Integer and bool tensors
must be equal.

A comparison is judged in the coarser float dtype of its two sides (`judged_dtype`): ULPs,
rounding and the budget are that dtype's. A float32 runtime against the float64 reference is
judged as float32, and so is the float64 reference against a float32 golden: the golden holds no
more than float32, so a float64 budget would fail it on its own rounding."""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

import opforge_spec as spec

TINY = np.finfo(np.float64).tiny
# floor of an ulp division: below every dtype's spacing at 0 (TINY would turn 1 ulp into 2e-16)
SPACING_FLOOR = np.finfo(np.float64).smallest_subnormal


@dataclass
class Metrics:
    ok: bool
    max_abs: float = 0.0
    max_rel: float = 0.0
    max_ulp: float = 0.0
    p99_ulp: float = 0.0
    mismatched: int = 0          # elements outside the tolerance (NaN/Inf pattern included)
    worst_index: tuple = ()      # the element furthest outside (or closest to) its tolerance
    worst_value: float | None = None
    worst_expected: float | None = None
    detail: str = ""             # why it could not be compared element-wise (shape, dtype kind)
    quantized: str = ""          # a quantized output's dtype (int8, float8_e4m3fn): judged in steps
    off_by_one: int = 0          # a quantized output's elements one quantization step off (allowed)

    def as_dict(self) -> dict:
        out = asdict(self)
        out["worst_index"] = list(self.worst_index)
        return out


def float_dtype(array) -> str | None:
    """The opforge_spec dtype name of a floating array (bfloat16 from ml_dtypes included), else None."""
    try:
        return spec.dtype_name(np.asarray(array).dtype)
    except (ValueError, TypeError):
        return None


def coarser(first: str | None, second: str | None) -> str | None:
    """The coarser of two opforge_spec dtype names (the wider spacing at 1.0); None (not
    floating) gives way to the other."""
    known = [d for d in (first, second) if d is not None]
    return max(known, key=lambda d: float(spec.ulp(d, 1.0)), default=None)


def judged_dtype(actual, expected) -> str | None:
    """The dtype a comparison is judged in: the coarser float dtype of its two sides; None when
    `actual` is not floating (compared exactly)."""
    own = float_dtype(actual)
    return None if own is None else coarser(own, float_dtype(expected))


def measure(actual, expected, rtol: float, atol: float) -> Metrics:
    """`actual` (a runtime's tensor) against `expected` (the baseline, any precision), judged in
    the coarser dtype of the two."""
    a, e = np.asarray(actual), np.asarray(expected)
    if a.shape != e.shape:
        return Metrics(False, mismatched=-1,
                       detail=f"shape: expected {list(e.shape)}, got {list(a.shape)}")
    dtype = judged_dtype(a, e)
    if dtype is None:
        return _measure_exact(a, e)
    if a.size == 0:
        return Metrics(True)
    with np.errstate(all="ignore"):
        return _measure_float(a.astype(np.float64), e.astype(np.float64), dtype, rtol, atol)


def _measure_float(a, e, dtype, rtol, atol) -> Metrics:
    e_rounded = spec.round_to(dtype, e).astype(np.float64)
    a_rounded = spec.round_to(dtype, a).astype(np.float64)  # a float64 side overflows as dtype's
    special = ~np.isfinite(e_rounded) | ~np.isfinite(a_rounded)
    pattern_bad = special & ~((np.isnan(a_rounded) & np.isnan(e_rounded)) | (a_rounded == e_rounded))
    finite = ~special
    diff = np.where(finite, np.abs(a - e), 0.0)
    magnitude = np.where(finite, np.abs(e), 0.0)
    scale = float(np.sqrt(np.mean(np.square(e[finite])))) if finite.any() else 0.0
    allowed = atol + rtol * (magnitude + scale)
    bad = pattern_bad | (finite & (diff > allowed))
    spacing = np.maximum(spec.ulp(dtype, np.where(finite, e, 0.0)), SPACING_FLOOR)
    ulps = np.where(finite, diff / spacing, 0.0)
    rel = diff / np.maximum(magnitude, TINY)
    # worst: the element furthest outside (or nearest to leaving) its tolerance
    ratio = np.where(allowed > 0, diff / np.where(allowed > 0, allowed, 1.0), np.where(diff > 0, np.inf, 0.0))
    worst = np.unravel_index(int(np.argmax(np.where(pattern_bad, np.inf, ratio))), a.shape)
    return Metrics(ok=not bad.any(), max_abs=float(diff.max()), max_rel=float(rel.max()),
                   max_ulp=float(ulps.max()), p99_ulp=_p99(ulps[finite]),
                   mismatched=int(bad.sum()), worst_index=tuple(int(i) for i in worst),
                   worst_value=float(a[worst]), worst_expected=float(e[worst]))


def measure_quantized(actual, expected, qdtype: str) -> Metrics:
    """A quantized output (an opforge op's output whose dtype an enum attribute picks: int8,
    float8 e4m3fn) against its expected value: equal, or one quantization step off (allowed,
    counted in off_by_one), at the dtype's spacing (opforge_spec.quantized_errors, the spec's own
    rule); `max_ulp` holds the largest error in steps."""
    a, e = _as_float64(actual), _as_float64(expected)
    if a.shape != e.shape:
        return Metrics(False, mismatched=-1, quantized=qdtype,
                       detail=f"shape: expected {list(e.shape)}, got {list(a.shape)}")
    if a.size == 0:
        return Metrics(True, quantized=qdtype)
    errs = spec.quantized_errors(a, e, qdtype)
    worst = tuple(errs.worst_index)
    return Metrics(ok=errs.mismatched == 0, max_abs=errs.max_abs, max_ulp=errs.max_ulp,
                   mismatched=errs.mismatched, worst_index=worst, worst_value=float(a[worst]),
                   worst_expected=float(e[worst]), quantized=qdtype, off_by_one=errs.off_by_one)


def _as_float64(values) -> np.ndarray:
    """float64 of any array, float8 (ml_dtypes) and int8 included."""
    return np.asarray(values).astype(np.float64)


def _measure_exact(a, e) -> Metrics:
    if not a.size:
        return Metrics(True)
    if a.dtype.kind not in "iub" or e.dtype.kind not in "iubf":  # strings and such: equality only
        equal = np.asarray(a == e)
        return Metrics(bool(equal.all()), mismatched=int((~equal).sum()))
    a64, e64 = a.astype(np.float64), e.astype(np.float64)
    diff = np.abs(a64 - e64)
    worst = np.unravel_index(int(np.argmax(diff)), a.shape)
    return Metrics(ok=bool((a64 == e64).all()), max_abs=float(diff.max()),
                   mismatched=int((a64 != e64).sum()), worst_index=tuple(int(i) for i in worst),
                   worst_value=float(a64[worst]), worst_expected=float(e64[worst]))


def _p99(values: np.ndarray) -> float:
    return float(np.percentile(values, 99)) if values.size else 0.0


def ulp_errors(actual, expected) -> np.ndarray:
    """Per-element error in ULP of the judged dtype (finite elements only): the plot's data."""
    a, e = np.asarray(actual), np.asarray(expected)
    dtype = judged_dtype(a, e)
    if dtype is None or a.shape != e.shape:
        return np.zeros(0)
    with np.errstate(all="ignore"):
        a64, e64 = a.astype(np.float64).ravel(), e.astype(np.float64).ravel()
        finite = np.isfinite(a64) & np.isfinite(e64)
        return np.abs(a64 - e64)[finite] / np.maximum(spec.ulp(dtype, e64[finite]), SPACING_FLOOR)
