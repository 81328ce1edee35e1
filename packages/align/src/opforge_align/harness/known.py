"""Deviations of third-party code in the path: ONNX Runtime's own operators and graph fusions
(which the decomposed form runs) and torch's exporters. Listed here with the evidence, shown in
every report as "known deviation", never as pass, and not counted as failures of opforge.
Anything not listed fails."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Deviation:
    form: str                 # export form prefix the deviation shows in
    op: str                   # or "*": every op (then `detail` names the failure)
    dtype: str               # or "*": every dtype
    cases: tuple = ("*",)
    ort_below: str = ""       # only ONNX Runtime releases before this one ("" = all)
    ort_from: str = ""        # only this ONNX Runtime release and later ("" = all)
    why: str = ""
    detail: str = ""          # only a failure whose detail says this ("" = any)


DEVIATIONS = (
    Deviation("decomposed-ts", "Swish", "float64", ("rank0",), why=(
        "torch's TorchScript exporter (seen with 2.13) treats a 0-d input as a scalar and Casts "
        "Mul's operands to float32 - plain x*torch.sigmoid(x) exports the same way - so the model "
        "returns float32 (the dynamo form is right)")),
    Deviation("decomposed", "Swish", "float64", ("wide_range",), why=(
        "ONNX Runtime's float64 Sigmoid is accurate in absolute, not relative, terms: for x < -30 "
        "x*Sigmoid(x) is off by ~1e-16*|x|, above the float64 tolerance")),
    Deviation("decomposed", "SwiGLU", "float64", ("wide_range",), why=(
        "the same float64 Sigmoid as Swish's: for a < -30 a*Sigmoid(a)*b is off by ~1e-16*|a*b|, "
        "above the float64 tolerance")),
    Deviation("decomposed", "GeGLU", "float64", ("wide_range",), ort_from="1.32", why=(
        "ONNX Runtime 1.32's float64 Tanh is not correctly rounded near -1 (-18 gives exactly -1.0, "
        "the rounded value is -1 + 4.4e-16; 1.20.1 gives it): the decomposed form's 1 + Tanh(u) "
        "cancels, so near a = -7 GeGLU's tail (~1.5e-15) comes out 0, off by more than atol 1e-15")),
    Deviation("decomposed", "Swish", "float64", ort_below="1.32", why=(
        "ORT_ENABLE_EXTENDED fuses Mul(x, Sigmoid(x)) into com.microsoft.QuickGelu, which has no "
        "float64 CPU kernel: session creation fails with NOT_IMPLEMENTED (seen in 1.17.3 and "
        "1.20.1, not in 1.32.0)")),
    Deviation("decomposed", "SwiGLU", "float64", ort_below="1.32", why=(
        "the same fusion in A*Sigmoid(A)*B: Mul(A, Sigmoid(A)) becomes com.microsoft.QuickGelu, "
        "which has no float64 CPU kernel: session creation fails with NOT_IMPLEMENTED (seen in "
        "1.17.3 and 1.20.1, not in 1.32.0)")),
    Deviation("decomposed", "RMSNorm", "float64", ort_below="1.32", why=(
        "ORT_ENABLE_EXTENDED fuses the float64 graph into SimplifiedLayerNormalization, which "
        "computes wrongly (float32-level error, epsilon=0.01 ignored: max abs error 2.04); "
        "ORT_ENABLE_BASIC is exact (seen in 1.17.3 and 1.20.1, not in 1.32.0)")),
    Deviation("decomposed", "AddRMSNorm", "float64", ort_below="1.32", why=(
        "the same fusion of the RMSNorm after the Add into SimplifiedLayerNormalization: output Y "
        "off by float32-level errors (8 of 12 cases, max abs error 1.6e-5 on random inputs), "
        "output H (the Add) exact (seen in 1.17.3, not in 1.32.0)")),
    Deviation("decomposed", "*", "*", ("empty_cols",), detail="Size of X.shape[axis:] must be at least 1, got 0",
              why=(
        "ORT_ENABLE_EXTENDED fuses a decomposed RMSNorm (RMSNormQuant's, AddRMSNormQuant's, any op's "
        "whose decomposed form normalizes an X that may have no columns) into "
        "SimplifiedLayerNormalization, which refuses an X without columns: 'Size of X.shape[axis:] "
        "must be at least 1, got 0' (seen in 1.17.3 and 1.32.0); unfused (ORT_ENABLE_BASIC) the same "
        "graph gives the empty Q and min_scale")),
)


def version_key(version: str) -> tuple:
    return tuple(int(p) if p.isdigit() else 0 for p in version.split("+", maxsplit=1)[0].split("."))


def explain(check, form: str, ort_versions) -> str:
    """Why `check` (a failed one) is a known deviation, or ""."""
    for d in DEVIATIONS:
        if not (form.startswith(d.form) and d.op in ("*", check.op) and d.dtype in ("*", check.dtype)):
            continue
        if d.detail and d.detail not in getattr(check, "detail", ""):
            continue
        if "*" not in d.cases and check.case not in d.cases:
            continue
        if d.ort_below and not any(version_key(v) < version_key(d.ort_below) for v in ort_versions):
            continue
        if d.ort_from and not any(version_key(v) >= version_key(d.ort_from) for v in ort_versions):
            continue
        return d.why
    return ""


def mark(results, form_of, versions_of) -> None:
    """Marks the failed checks of `results` that a listed deviation explains."""
    for check in results.checks:
        if not check.passed and not check.skipped:
            check.known = explain(check, form_of(check), versions_of(check))
