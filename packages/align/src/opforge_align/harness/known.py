"""Deviations of third-party code in the path: ONNX Runtime's own operators and graph fusions
(which the decomposed form runs) and torch's exporters. Listed here with the evidence, shown in
every report as "known deviation", never as pass, and not counted as failures of opforge.
Anything not listed fails."""
from __future__ import annotations

import re
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
    outputs: tuple = ()       # only a failure of these outputs (an op of several outputs: every
                              # output its detail names is one of these); () = any


FUSED_FLOAT64_EPSILON = (
    "ORT_ENABLE_EXTENDED fuses the decomposed form's float64 RMSNorm into SimplifiedLayerNormalization, "
    "which takes epsilon from the Add's constant only when that is float32: for float64 X it runs "
    "with the default 1e-5 (Scale bit-identical to the unfused graph given epsilon 1e-5), so Scale "
    "is off by about (1e-5 - epsilon) / (2 * mean square), 2e-6..1e-5 relative for epsilon 1e-6 "
    "(tolerance 1e-6); ORT_ENABLE_BASIC is within 1e-7, float32 X is fused with its epsilon (seen "
    "in 1.17.3, 1.24.4 and 1.31.1 at opsets 17 and 21, both exporters; not in 1.32.0)")

EMPTY_REDUCTION = (
    "ONNX Runtime's CPU reductions (ReduceMax, ReduceMean; keepdims=1, axes [-1] as attribute at "
    "opset 17 or as input from 18) of an input without elements return the input's shape: [0, 16] "
    "-> [0, 16] instead of [0, 1], [3, 0] -> [3, 0] instead of [3, 1] (microsoft/onnxruntime#7563 "
    "describes the latter); seen in 1.17.3, 1.24.4 and 1.31.1, not in 1.32.0 nor in onnx's reference "
    "evaluator. The row output Scale of the decomposed form (RMSNormQuant's, AddRMSNormQuant's "
    "ReduceMax of |Y|) takes that shape; its Q and H are right")

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
    Deviation("decomposed", "GeGLU", "float64", ("wide_range",), ort_from="1.24", why=(
        "ONNX Runtime's float64 Tanh is not correctly rounded near -1 (-18 gives exactly -1.0, the "
        "rounded value is -1 + 4.4e-16; 1 + Tanh(-17) is 3.33e-15 for 3.44e-15): seen in 1.24.4, "
        "1.31.1 and 1.32.0, while 1.17.3 and 1.20.1 give the rounded values; the decomposed form's "
        "1 + Tanh(u) cancels, so near a = -7 GeGLU's tail (~1.5e-15) comes out 0, off by more than "
        "atol 1e-15")),
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
        "computes wrongly (float32-level error, epsilon=0.01 ignored: max abs error 2.04; the fused "
        "node runs with the default epsilon 1e-5, within 2e-9 of the unfused graph given 1e-5); "
        "ORT_ENABLE_BASIC is exact (seen in 1.17.3, 1.20.1, 1.24.4 and 1.31.1, not in 1.32.0)")),
    Deviation("decomposed", "AddRMSNorm", "float64", ort_below="1.32", why=(
        "the same fusion of the RMSNorm after the Add into SimplifiedLayerNormalization: output Y "
        "off by float32-level errors (8 of 12 cases, max abs error 1.6e-5 on random inputs), "
        "output H (the Add) exact (seen in 1.17.3, not in 1.32.0)")),
    Deviation("decomposed", "*", "*", ("empty_rows",), ort_below="1.32", outputs=("Scale",),
              detail="shape: expected [0, 1], got [0, 16]", why=EMPTY_REDUCTION),
    Deviation("decomposed", "*", "*", ("empty_cols",), ort_below="1.32", outputs=("Scale",),
              detail="shape: expected [3, 1], got [3, 0]", why=EMPTY_REDUCTION),
    Deviation("decomposed", "RMSNormQuant", "float64", ort_below="1.32", outputs=("Scale",),
              detail="worst element", why=FUSED_FLOAT64_EPSILON),
    Deviation("decomposed", "AddRMSNormQuant", "float64", ort_below="1.32", outputs=("Scale",),
              detail="worst element", why=FUSED_FLOAT64_EPSILON),
    Deviation("decomposed", "*", "*", ("empty_cols",), detail="Size of X.shape[axis:] must be at least 1, got 0",
              why=(
        "ORT_ENABLE_EXTENDED fuses a decomposed RMSNorm (RMSNormQuant's, AddRMSNormQuant's, any op's "
        "whose decomposed form normalizes an X that may have no columns) into "
        "SimplifiedLayerNormalization, which refuses an X without columns: 'Size of X.shape[axis:] "
        "must be at least 1, got 0' (seen in 1.17.3, 1.24.4, 1.31.1 and 1.32.0); unfused "
        "(ORT_ENABLE_BASIC) the same graph gives the empty Q and min_scale")),
)


def version_key(version: str) -> tuple:
    return tuple(int(p) if p.isdigit() else 0 for p in version.split("+", maxsplit=1)[0].split("."))


def failing_outputs(check) -> list:
    """The outputs a failed check's detail names (an op of several outputs: "output Scale: ...;
    output Q: ..."); [None] where it names none (an op of one output, a run that failed)."""
    return re.findall(r"(?:^|; )output (\w+): ", getattr(check, "detail", "")) or [None]


def explain(check, form: str, ort_versions) -> str:
    """Why `check` (a failed one) is a known deviation, or ""."""
    for d in DEVIATIONS:
        if not (form.startswith(d.form) and d.op in ("*", check.op) and d.dtype in ("*", check.dtype)):
            continue
        if d.detail and d.detail not in getattr(check, "detail", ""):
            continue
        if d.outputs and not set(failing_outputs(check)) <= set(d.outputs):
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
