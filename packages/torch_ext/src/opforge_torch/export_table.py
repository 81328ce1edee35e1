"""Which form of each opforge op an ``export(..., decomposed="auto")`` writes for a runtime.

Three forms of an op: the ``opforge`` node (needs the runtime's opforge plugin), the ``standard``
ONNX op (:data:`STANDARD_FORMS`: needs an opset >= the op's version and a runtime version that
implements it), the ``decomposed`` standard graph of the spec (OpSpec.decomposed; every runtime).
What each runtime implements and how fast each form runs there is data, read from
``export_table.json`` beside this module: ONNX Runtime's rows measured by
``bench/opforge_bench/export_forms.py`` (which writes them), TensorRT's from its documentation.
:func:`plan` picks per op, and says why, the incumbent form - the runtime's standard op where it
runs it at the export's opset, else the table's preference for the runtime, else the opforge
node - unless another form the runtime implements is measurably faster there
(:data:`MEASURABLY_FASTER`).
"""
from __future__ import annotations

import functools
import importlib.metadata
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import opforge_spec

TABLE_PATH = Path(__file__).with_name("export_table.json")
FORMS = ("opforge", "standard", "decomposed")
RUNTIMES = ("onnxruntime", "tensorrt")
# Another form replaces the incumbent only when its median is below this fraction of the
# incumbent's: a user whose runtime implements the standard op wants it, unless ours is measurably
# faster there (and one noisy sample of a loaded machine does not flip a choice).
MEASURABLY_FASTER = 0.9
_PACKAGES = {"onnxruntime": ("onnxruntime", "onnxruntime-gpu"),
             "tensorrt": ("tensorrt", "tensorrt-cu13", "tensorrt-cu12")}


# ai.onnx ops that compute an opforge op: each op's OpSpec.standard (checked against onnx.defs by
# the tests). RMSNormalization-23 (X, scale; epsilon, axis, stash_type), Swish-24 (alpha),
# SwiGLU-28 (A = the gate, B = the value: Y = Swish_alpha(A) * B, opforge's X[..., :d], X[..., d:]).
# AddRMSNorm is an Add (H) then RMSNormalization-23 of it (Y).
STANDARD_FORMS = opforge_spec.standard_forms()
STASH_FLOAT32 = 1  # RMSNormalization's stash_type: the mean square in float32, as opforge's kernels
FLOAT32 = opforge_spec.DTYPE_CODES["float32"]  # an ONNX element type (Cast's `to`)


def _halves(e, x) -> tuple:
    """A = X[..., :d], B = X[..., d:] for a last dim 2d known only at run time."""
    half = e.op("Div", e.op("Gather", e.op("Shape", x), e.ints([-1]), axis=0), e.ints([2]))
    return (e.op("Slice", x, e.ints([0]), half, e.ints([-1])),
            e.op("Slice", x, half, e.ints([2**62]), e.ints([-1])))


def _rms_normalization(e, x, w, epsilon: float, x_type: int | None = None):
    """`x_type`: X's ONNX element type in a mixed call (a float32 W beside a 16-bit X). ONNX's type
    inference gives RMSNormalization's Y X's type while its schema gives it the scale's, so the
    checker refuses the two types apart: X is upcast (exact) and Y cast back, the row computed in
    float32 with W as given, as the kernels compute it."""
    if x_type is not None:
        x = e.op("Cast", x, to=FLOAT32)
    y = e.op("RMSNormalization", x, w, epsilon=float(epsilon), axis=-1, stash_type=STASH_FLOAT32)
    return y if x_type is None else e.op("Cast", y, to=x_type)


def _write_rms_norm(e, x, w, epsilon: float, x_type: int | None = None):
    return _rms_normalization(e, x, w, epsilon, x_type)


def _write_add_rms_norm(e, x, r, w, epsilon: float, x_type: int | None = None):
    h = e.op("Add", x, r)
    return _rms_normalization(e, h, w, epsilon, x_type), h


def _write_swish(e, x, beta: float):
    return e.op("Swish", x, alpha=float(beta))


def _write_swiglu(e, x, beta: float):
    a, b = _halves(e, x)
    return e.op("SwiGLU", a, b, alpha=float(beta))


_WRITERS: dict[str, Callable[..., Any]] = {"RMSNorm": _write_rms_norm, "AddRMSNorm": _write_add_rms_norm,
            "Swish": _write_swish, "SwiGLU": _write_swiglu}


def standard_form_refusal(op: str, attrs: dict, x_dtype: str | None = None) -> str | None:
    """Why a call must not take the standard op, or None: RMSNormalization with epsilon 0 divides
    a row of zeros by 0 (NaN) where opforge gives 0, and its stash_type 1 computes a float64 X's
    mean square in float32 where opforge computes in float64 (`x_dtype`: X's ONNX or numpy type
    name, when the exporter knows it)."""
    if op not in ("RMSNorm", "AddRMSNorm"):
        return None
    if float(attrs.get("epsilon", 1.0)) == 0.0:
        return "epsilon 0: RMSNormalization gives NaN on a row of zeros, opforge 0"
    if x_dtype is not None and x_dtype.upper().rsplit(".", 1)[-1] in ("DOUBLE", "FLOAT64"):
        return "float64 X: RMSNormalization (stash_type 1) computes in float32, opforge in float64"
    return None


def write_standard(e, op: str, *inputs_and_attrs, x_type: int | None = None):
    """The op's standard form through an emitter (OpSpec.decomposed's interface): one node, or
    AddRMSNorm's (Y, H). `x_type`: X's ONNX element type in a mixed call (a float32 W beside a
    16-bit X), else None."""
    if x_type is None:
        return _WRITERS[op](e, *inputs_and_attrs)
    return _WRITERS[op](e, *inputs_and_attrs, x_type=x_type)


# --------------------------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------------------------
@functools.cache
def table() -> dict:
    return json.loads(TABLE_PATH.read_text())


def _version_key(version: str) -> tuple:
    parts = []
    for piece in version.split("+", maxsplit=1)[0].split("."):
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def row(runtime: str, version: str) -> tuple[str, dict]:
    """(the table's version, its row) for `runtime` at `version`: the row of the newest listed
    version <= `version` (a row holds from its version to the next)."""
    rows = table()["runtimes"][runtime]
    listed = sorted(rows, key=_version_key)
    fitting = [v for v in listed if _version_key(v) <= _version_key(version)]
    if not fitting:
        raise ValueError(f"opforge_torch.onnx.export: runtime_version: expected {runtime} >= "
                         f"{listed[0]} (the export table's oldest row), got {version!r}")
    return fitting[-1], rows[fitting[-1]]


def installed_version(runtime: str) -> str | None:
    for package in _PACKAGES[runtime]:
        try:
            return importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


@dataclass(frozen=True)
class Choice:
    op: str
    form: str    # one of FORMS
    why: str


@dataclass(frozen=True)
class ExportPlan:
    """Per op the form an export writes, and why; str() is the report a user reads."""
    runtime: str
    runtime_version: str
    table_row: str
    opset: int
    choices: tuple

    def form(self, op: str) -> str:
        return next(c.form for c in self.choices if c.op == op)

    def ops(self, form: str) -> frozenset:
        return frozenset(c.op for c in self.choices if c.form == form)

    def __str__(self) -> str:
        head = (f"opforge export plan for {self.runtime} {self.runtime_version} (table row "
                f"{self.table_row}), opset {self.opset}:")
        return "\n".join([head, *(f"  {c.op}: {c.form} ({c.why})" for c in self.choices)])


def plan(runtime: str, runtime_version: str | None, opset: int) -> ExportPlan:
    """The form of every op of the spec for `runtime` at `runtime_version` (None: the installed
    runtime's version, else the table's oldest row) and `opset`."""
    if runtime not in RUNTIMES:
        raise ValueError(f"opforge_torch.onnx.export: runtime: expected one of "
                         f"{', '.join(RUNTIMES)}, got {runtime!r}")
    version = runtime_version or installed_version(runtime) or _oldest(runtime)
    listed, entry = row(runtime, version)
    prefer = table().get("prefer", {}).get(runtime, {})
    choices = tuple(_choose(op, entry, opset, prefer.get(op)) for op in opforge_spec.OPS)
    return ExportPlan(runtime, version, listed, opset, choices)


def _oldest(runtime: str) -> str:
    return min(table()["runtimes"][runtime], key=_version_key)


def _implemented(op: str, entry: dict, opset: int) -> dict:
    """{form: why it is (not) available} for the forms the runtime runs at `opset`."""
    forms = {"decomposed": "standard ops of opsets 13..21, every runtime"}
    if entry.get("plugin", False):
        forms["opforge"] = "the runtime's opforge plugin"
    standard = STANDARD_FORMS.get(op)
    if standard and opset >= standard.opset and opset in entry.get("standard_opsets", {}).get(op, []):
        forms["standard"] = f"{standard.op_type}-{standard.opset} runs there at opset {opset}"
    return forms


def _choose(op: str, entry: dict, opset: int, preferred: dict | None) -> Choice:
    """The incumbent form - the runtime's standard op where it runs it, else the table's
    preference for the runtime (a graph pass of its that only meets the decomposed form), else
    the opforge node - unless another form the runtime implements is measurably faster there."""
    available = _implemented(op, entry, opset)
    times = {form: ms for form, ms in entry.get("median_ms", {}).get(op, {}).items()
             if form in available and ms is not None}
    if "standard" in available:
        incumbent, why = "standard", available["standard"]
    elif preferred and preferred["form"] in available:
        return Choice(op, preferred["form"], preferred["why"])
    else:
        incumbent = "opforge" if "opforge" in available else "decomposed"
        why = available[incumbent]
    if incumbent not in times:
        return Choice(op, incumbent, f"{why}; not timed in the table")
    faster = {f: ms for f, ms in times.items() if ms < MEASURABLY_FASTER * times[incumbent]}
    if faster:
        best = min(faster, key=faster.__getitem__)
        return Choice(op, best, f"measurably faster than {incumbent}: {_timed_why(best, times)}")
    return Choice(op, incumbent, f"{why}; {_timed_why(incumbent, times)}")


def _timed_why(form: str, times: dict) -> str:
    others = ", ".join(f"{f} {ms:.3g}" for f, ms in sorted(times.items()) if f != form)
    return f"median {times[form]:.3g} ms" + (f" vs {others}" if others else "")
