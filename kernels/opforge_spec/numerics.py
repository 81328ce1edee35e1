"""Dtype handling, tolerances and error measurement shared by every layer's tests."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DTYPES = ("float64", "float32", "float16", "bfloat16")


def dtype_name(dtype) -> str:
    """Normalize a numpy dtype, a torch dtype or a string to one of DTYPES."""
    name = str(dtype).replace("torch.", "")
    if name in ("bfloat16", "bf16"):
        return "bfloat16"
    name = np.dtype(name).name
    if name not in DTYPES:
        raise ValueError(f"opforge_spec: unsupported dtype {dtype!r}; expected one of {DTYPES}")
    return name


def round_to(dtype, values) -> np.ndarray:
    """Values representable in `dtype`, as a numpy array of that dtype (bfloat16: float32 holding
    bfloat16 values, rounded to nearest even)."""
    name = dtype_name(dtype)
    a = np.asarray(values, dtype=np.float64)
    if name != "bfloat16":
        with np.errstate(over="ignore"):
            return a.astype(name)
    f = a.astype(np.float32)
    bits = f.view(np.uint32).astype(np.uint64)
    sixteen = np.uint64(16)  # numpy < 2 turns `uint64 >> int` of 0-d arrays into float64
    rounded = ((bits + np.uint64(0x7FFF) + ((bits >> sixteen) & np.uint64(1))) >> sixteen) << sixteen
    out = rounded.astype(np.uint32).view(np.float32)
    return np.where(np.isnan(f), np.float32("nan"), out)


SMALLEST_SPACING = float(np.finfo(np.float64).smallest_subnormal)


def ulp(dtype, values) -> np.ndarray:
    """Spacing of `dtype` at each value (its unit in the last place), as float64."""
    name = dtype_name(dtype)
    v = np.abs(np.asarray(values, dtype=np.float64))
    if name == "bfloat16":
        return np.spacing(v.astype(np.float32)).astype(np.float64) * 2.0**16
    with np.errstate(over="ignore"):
        return np.spacing(v.astype(name)).astype(np.float64)


@dataclass(frozen=True)
class Errors:
    max_abs: float
    max_rel: float
    max_ulp: float
    worst_index: tuple
    mismatched: int  # elements outside tolerance (NaN/Inf pattern mismatches included)
    off_by_one: int = 0  # a quantized output's elements one quantization step off (allowed)

    def as_dict(self) -> dict:
        return {"max_abs": self.max_abs, "max_rel": self.max_rel, "max_ulp": self.max_ulp,
                "mismatched": self.mismatched}


def measure(actual, expected64, dtype, rtol: float, atol: float) -> Errors:
    """Error of `actual` against a float64 reference. NaN must sit where the reference has NaN and
    infinities must match exactly; everything else is compared as |a-e| <= atol + rtol*|e|."""
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected64, dtype=np.float64)
    if a.shape != e.shape:
        raise AssertionError(f"shape mismatch: got {a.shape}, expected {e.shape}")
    if a.size == 0:
        return Errors(0.0, 0.0, 0.0, (), 0)
    with np.errstate(invalid="ignore", over="ignore"):
        return _measure(a, e, dtype, rtol, atol)


def _measure(a, e, dtype, rtol, atol) -> Errors:
    special = ~np.isfinite(e) | ~np.isfinite(a)
    pattern_bad = special & ~((np.isnan(a) & np.isnan(e)) | (a == e))
    finite = ~special
    diff = np.where(finite, np.abs(a - e), 0.0)
    rel = np.where(finite, diff / np.maximum(np.abs(e), np.finfo(np.float64).tiny), 0.0)
    # spacing is never 0; the floor only guards the division. It must stay below the subnormal
    # spacing near 0 (tiny would make a 1-ulp error at 0.0 read as 2e-16 ulp).
    ulps = np.where(finite, diff / np.maximum(ulp(dtype, e), SMALLEST_SPACING), 0.0)
    bad = pattern_bad | (finite & (diff > atol + rtol * np.abs(np.where(finite, e, 0.0))))
    score = np.where(pattern_bad, np.inf, diff - (atol + rtol * np.abs(np.where(finite, e, 0.0))))
    worst = np.unravel_index(int(np.argmax(score)), a.shape)
    return Errors(float(diff.max()), float(rel.max()), float(ulps.max()), tuple(int(i) for i in worst),
                  int(bad.sum()))


def describe_worst(actual, expected64, errors: Errors, inputs=()) -> str:
    idx = errors.worst_index
    parts = [(f"worst element at index {list(idx)}: got {np.asarray(actual)[idx]!r}, "
              f"expected {np.asarray(expected64)[idx]!r}")]
    for i, given in enumerate(inputs):
        x = np.asarray(given)
        if x.shape == np.asarray(actual).shape:
            parts.append(f"input {i} there = {x[idx]!r}")
    return "; ".join(parts)


# The quantized dtypes an output may have (OpSpec.output_dtypes through an enum attribute), each
# with its largest finite value.
QUANTIZED_DTYPES = {"int8": 127.0, "float8_e4m3fn": 448.0}


def quant_step(qdtype: str, values) -> np.ndarray:
    """The spacing of the quantized dtype at each value: 1 for int8; for float8 e4m3fn (3 mantissa
    bits, exponent bias 7) 2^(e-3) in the binade [2^e, 2^(e+1)), 2^-9 among the subnormals."""
    v = np.abs(np.asarray(values, dtype=np.float64))
    if qdtype == "int8":
        return np.ones_like(v)
    if qdtype != "float8_e4m3fn":
        raise ValueError(f"opforge_spec: unsupported quantized dtype {qdtype!r}; expected one of "
                         f"{tuple(QUANTIZED_DTYPES)}")
    with np.errstate(divide="ignore", invalid="ignore"):
        exponent = np.where(v > 0, np.floor(np.log2(np.where(v > 0, v, 1.0))), -np.inf)
    return np.exp2(np.maximum(exponent, -6.0) - 3.0)


def quantized_errors(actual, expected64, qdtype: str) -> Errors:
    """A quantized output against its reference: `mismatched` counts elements more than one
    quantization step off (or NaN where the other is not), `off_by_one` those one step off. The
    step is the spacing at the smaller of the two magnitudes (at a binade edge the finer one)."""
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected64, dtype=np.float64)
    if a.shape != e.shape:
        raise AssertionError(f"shape mismatch: got {a.shape}, expected {e.shape}")
    if a.size == 0:
        return Errors(0.0, 0.0, 0.0, (), 0)
    with np.errstate(invalid="ignore"):
        nan_bad = np.isnan(a) != np.isnan(e)
        both = ~np.isnan(a) & ~np.isnan(e)
        diff = np.where(both, np.abs(a - e), 0.0)
        steps = diff / quant_step(qdtype, np.minimum(np.abs(a), np.abs(e)))
    steps = np.where(nan_bad, np.inf, steps)
    worst = np.unravel_index(int(np.argmax(steps)), a.shape)
    return Errors(float(diff.max()), 0.0, float(steps.max()), tuple(int(i) for i in worst),
                  int((steps > 1).sum()), int(((steps > 0) & (steps <= 1)).sum()))
