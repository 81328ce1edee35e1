"""Comparisons, their records and the stage result (flat numbers for the matrix report)."""
from __future__ import annotations

import json
import math
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

import opforge_spec as spec
from opforge_spec.numerics import describe_worst

from ..outputs import as_tuple

# How far two implementations of *different* algorithms may lie apart: each is within the spec
# tolerance of the float64 reference, so by the triangle inequality within twice of each other.
NEIGHBOUR_SCALE = 2.0


@dataclass
class Check:
    layer: str          # "1", "2", "3", "cross"
    op: str
    dtype: str
    subject: str        # what is under test, e.g. "opforge_torch.cpu", "ort.custom-dynamo"
    against: str        # "reference" (float64) or the neighbour's name
    case: str
    rule: str
    passed: bool = True
    max_abs: float = 0.0
    max_rel: float = 0.0
    max_ulp: float = 0.0
    mismatched: int = 0
    detail: str = ""
    skipped: str = ""   # non-empty: not run, and why (never counted as passed)
    known: str = ""     # a listed deviation of a third-party runtime: failed, but not ours
    output: str = ""    # an op of several outputs: the worst one (the first to name when failed)

    @property
    def status(self) -> str:
        if self.skipped:
            return f"skipped: {self.skipped}"
        return "pass" if self.passed else (f"known deviation: {self.known}" if self.known else "fail")


def _measure(actual, expected, dtype, rtol, atol):
    """spec.measure, with a shape mismatch reported as a failed check instead of raised."""
    if np.shape(actual) != np.shape(expected):
        return None
    return spec.measure(actual, expected, dtype, rtol, atol)


def _judge(check: Check, op, actual, expected, inputs, *, rtol, atol, passes=None,
           quantized: dict | None = None) -> Check:
    """Each output of `actual` against `expected`'s (one for most ops; AddRMSNorm's Y and H): the
    check fails when any output does, and holds the worst output's errors; for an op of several
    outputs `check.output` and the detail name the one(s) that diverged. `passes(errs, a, e)`
    is the rule (default: no element outside rtol/atol); an output named in `quantized` (output ->
    its dtype: int8, float8_e4m3fn) is judged in quantization steps instead (one step allowed)."""
    actuals, expecteds = as_tuple(op, actual), as_tuple(op, expected)
    if len(actuals) != len(op.outputs):
        check.passed, check.mismatched = False, -1
        check.detail = (f"outputs: expected {len(op.outputs)} ({', '.join(op.outputs)}), got "
                        f"{len(actuals)}")
        return check
    quantized = quantized or {}
    judged = [_judge_quantized(name, a, e, quantized[name]) if name in quantized
              else _judge_one(name, a, e, check.dtype, rtol, atol, passes)
              for name, a, e in zip(op.outputs, actuals, expecteds)]
    failing = [j for j in judged if not j["passed"]]
    worst = max(judged, key=lambda j: (not j["passed"], j["errs"].max_ulp if j["errs"] else math.inf))
    check.passed = not failing
    check.output = worst["name"] if len(judged) > 1 else ""
    if worst["errs"] is not None:
        errs = worst["errs"]
        check.max_abs, check.max_rel, check.max_ulp = errs.max_abs, errs.max_rel, errs.max_ulp
        check.mismatched = errs.mismatched
    else:
        check.mismatched = -1
    if failing:
        texts = [_why(j, inputs) for j in failing]
        check.detail = texts[0] if len(judged) == 1 else "; ".join(
            f"output {j['name']}: {text}" for j, text in zip(failing, texts))
    return check


def _judge_one(name, actual, expected, dtype, rtol, atol, passes) -> dict:
    errs = _measure(actual, expected, dtype, rtol, atol)
    ok = errs is not None and (passes(errs, actual, expected) if passes else not errs.mismatched)
    return {"name": name, "actual": actual, "expected": expected, "errs": errs, "passed": ok}


def _judge_quantized(name, actual, expected, qdtype: str) -> dict:
    """A quantized output within one quantization step of `expected` (spec.quantized_errors): a
    formula computed in other precisions lands a step apart where Y / Scale is near a tie."""
    errs = spec.quantized_errors(actual, expected, qdtype) if np.shape(actual) == np.shape(expected) else None
    return {"name": name, "actual": actual, "expected": expected, "errs": errs,
            "passed": errs is not None and not errs.mismatched}


def _why(judged: dict, inputs) -> str:
    a, e, errs = judged["actual"], judged["expected"], judged["errs"]
    if errs is None:
        return f"shape: expected {list(np.shape(e))}, got {list(np.shape(a))}"
    return describe_worst(a, e, errs, inputs)


def _check(op, dtype, rule: str, **where) -> Check:
    return Check(op=op.name, dtype=spec.dtype_name(dtype), rule=rule, **where)


def against_reference(op, actual, inputs, attrs, dtype, **where) -> Check:
    """`actual` (each output) within the spec tolerance of the float64 reference."""
    rtol, atol = op.tolerance(dtype)
    check = _check(op, dtype, f"rtol={rtol:g} atol={atol:g}", against="reference", **where)
    return _judge(check, op, actual, op.reference(*inputs, **attrs), inputs, rtol=rtol, atol=atol,
                  quantized=quantized_outputs(op, attrs))


def quantized_outputs(op, attrs: dict) -> dict:
    """The op's quantized outputs (their dtype picked by an enum attribute) -> that dtype."""
    return {name: op.output_dtype(name, "", attrs) for name in op.outputs if op.quantized_output(name)}


def against_neighbour(op, actual, neighbour, inputs, dtype, *, against: str,
                      attrs: dict | None = None, **where) -> Check:
    """Two different algorithms: within NEIGHBOUR_SCALE x the spec tolerance of each other (a
    quantized output: within one quantization step of the dtype `attrs` pick; None: the op's
    defaults, as a decomposed form writes only those: OpSpec.decomposed_refusal)."""
    rtol, atol = (NEIGHBOUR_SCALE * t for t in op.tolerance(dtype))
    check = _check(op, dtype, f"rtol={rtol:g} atol={atol:g}", against=against, **where)
    return _judge(check, op, actual, neighbour, inputs, rtol=rtol, atol=atol,
                  quantized=quantized_outputs(op, attrs or {}))


def same_bits(op, actual, other, inputs, dtype, *, against: str, max_ulp: float = 0, **where) -> Check:
    """The same kernel code on the same machine: at most `max_ulp` apart (0: bitwise equal, NaN
    where the other has NaN)."""
    def passes(errs, a, b):
        return _special_pattern_equal(a, b) and (
            errs.mismatched == 0 if max_ulp == 0 else errs.max_ulp <= max_ulp)

    rule = "bitwise equal" if max_ulp == 0 else f"<= {max_ulp:g} ulp"
    check = _check(op, dtype, rule, against=against, **where)
    return _judge(check, op, actual, other, inputs, rtol=0.0, atol=0.0, passes=passes)


def _special_pattern_equal(a, b) -> bool:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        return False
    special = ~np.isfinite(a) | ~np.isfinite(b)
    return bool(np.all(~special | (np.isnan(a) & np.isnan(b)) | (a == b)))


def skipped(reason: str, **where) -> Check:
    where.setdefault("case", "*")
    where.setdefault("rule", "-")
    return Check(passed=False, skipped=reason, **where)


def failed(detail: str, **where) -> Check:
    """A check that could not even compare (export, session or run failed): a failure."""
    where.setdefault("case", "*")
    where.setdefault("rule", "runs")
    return Check(passed=False, detail=detail[:2000], mismatched=-1, **where)


def inject_fault(kind: str | None, y: np.ndarray, dtype) -> np.ndarray:
    """The harness's self-test: a deliberately wrong kernel output (`ulp`: 1 ulp too large,
    `sign`: sign flipped). Never used outside tests."""
    if not kind or kind == "none":
        return y
    if isinstance(y, tuple):  # every output of an op of several
        return tuple(inject_fault(kind, v, dtype) for v in y)
    y = np.array(y, copy=True)
    if kind == "sign":
        return -y
    if kind == "ulp":
        step = spec.ulp(dtype, y).astype(y.dtype)
        return np.where(np.isfinite(y), y + step, y).astype(y.dtype)
    raise ValueError(f"inject_fault: kind: expected 'ulp', 'sign' or 'none', got {kind!r}")


# ------------------------------------------------------------------------------------ reporting
@dataclass
class Results:
    checks: list = field(default_factory=list)
    context: dict = field(default_factory=dict)   # versions, paths: written next to the checks

    def add(self, check: Check) -> Check:
        self.checks.append(check)
        return check

    def extend(self, other: Results) -> None:
        self.checks.extend(other.checks)
        self.context.update(other.context)

    @property
    def failed(self) -> list:
        return [c for c in self.checks if not c.skipped and not c.passed and not c.known]

    @property
    def known(self) -> list:
        return [c for c in self.checks if not c.skipped and not c.passed and c.known]

    def summary(self) -> list:
        """One row per layer x op x dtype x subject x against: the worst over the cases."""
        rows: dict = {}
        for c in self.checks:
            key = (c.layer, c.op, c.dtype, c.subject, c.against)
            row = rows.setdefault(key, {"layer": c.layer, "op": c.op, "dtype": c.dtype,
                                        "subject": c.subject, "against": c.against, "rule": c.rule,
                                        "cases": 0, "failed": 0, "max_abs": 0.0, "max_rel": 0.0,
                                        "max_ulp": 0.0, "worst_case": "", "skipped": "",
                                        "known": 0, "failures": []})
            if c.skipped:
                row["skipped"] = c.skipped
                continue
            row["cases"] += 1
            if c.max_ulp >= row["max_ulp"]:
                row["worst_case"] = c.case
            for k in ("max_abs", "max_rel", "max_ulp"):
                row[k] = max(row[k], getattr(c, k))
            if not c.passed:
                row["known" if c.known else "failed"] += 1
                note = f" [known deviation: {c.known}]" if c.known else ""
                row["failures"].append(f"{c.case}: {c.mismatched} element(s) outside {c.rule}; "
                                       f"{c.detail}{note}")
        return list(rows.values())

    def numbers(self, prefix: str = "align") -> dict:
        out = {}
        for row in self.summary():
            name = ".".join([prefix, f"l{row['layer']}", row["op"], row["dtype"], row["subject"],
                             f"vs_{row['against']}"])
            if row["skipped"] and not row["cases"]:
                out[f"{name}.skipped"] = row["skipped"]
                continue
            for k in ("max_abs", "max_rel", "max_ulp"):
                out[f"{name}.{k}"] = _finite(row[k])
            out[f"{name}.pass"] = int(row["failed"] == 0)
            if row["known"]:
                out[f"{name}.known_deviations"] = row["known"]
        runs = [c for c in self.checks if not c.skipped]
        out[f"{prefix}.checks"] = len(runs)
        out[f"{prefix}.failed"] = len(self.failed)
        out[f"{prefix}.known_deviations"] = len(self.known)
        out[f"{prefix}.skipped"] = len(self.checks) - len(runs)
        return out

    def markdown(self, title: str) -> str:
        lines = [f"# {title}", ""]
        for k, v in self.context.items():
            if not isinstance(v, (dict, list)):  # long tables stay in the JSON
                lines.append(f"- {k}: {v}")
        header = ("| layer | op | dtype | subject | vs | rule | cases | max abs | max rel | "
                  "max ulp | status |")
        lines += ["", header, "|" + "---|" * 11]
        for r in self.summary():
            status = (f"skipped: {r['skipped']}" if r["skipped"] and not r["cases"] else
                      f"FAIL ({r['failed']})" if r["failed"] else
                      f"known deviation ({r['known']})" if r["known"] else "pass")
            lines.append(f"| {r['layer']} | {r['op']} | {r['dtype']} | {r['subject']} | "
                         f"{r['against']} | {r['rule']} | {r['cases']} | {r['max_abs']:.3g} | "
                         f"{r['max_rel']:.3g} | {r['max_ulp']:.3g} | {status} |")
        failures = [f"- {r['subject']} vs {r['against']} ({r['op']}, {r['dtype']}) {f}"
                    for r in self.summary() for f in r["failures"]]
        if failures:
            lines += ["", "## Failures and known deviations", "", *failures]
        return "\n".join(lines) + "\n"

    def write(self, out_dir: Path, name: str, title: str) -> list:
        """`<name>.json` (every check) and `<name>.md` (the summary table) in out_dir."""
        out_dir.mkdir(parents=True, exist_ok=True)
        payload = {"context": self.context,
                   "checks": [{**asdict(c), **{k: _finite(getattr(c, k))
                                               for k in ("max_abs", "max_rel", "max_ulp")}}
                              for c in self.checks],
                   "summary": self.summary()}
        json_path, md_path = out_dir / f"{name}.json", out_dir / f"{name}.md"
        json_path.write_text(json.dumps(_json_safe(payload), indent=1))
        md_path.write_text(self.markdown(title))
        return [str(json_path), str(md_path)]

    def print_failures(self, stream=sys.stderr) -> None:
        if self.known:
            print(f"{len(self.known)} known deviation(s) of third-party runtimes (listed in the "
                  "report, not counted as failures)", file=stream)
        for c in self.failed:
            output = f" output {c.output}" if c.output else ""
            print(f"FAIL layer {c.layer} {c.subject} vs {c.against} opforge.{c.op}{output} {c.dtype} "
                  f"case {c.case}: {c.mismatched} element(s) outside {c.rule} (max abs "
                  f"{c.max_abs:.3g}, max rel {c.max_rel:.3g}, max {c.max_ulp:.3g} ulp); {c.detail}",
                  file=stream)


def _finite(v: float) -> float:
    return v if math.isfinite(v) else (math.copysign(1.7976931348623157e308, v) if not math.isnan(v)
                                       else -1.0)


def _json_safe(obj):
    if isinstance(obj, float):
        return _finite(obj)
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return obj


def write_stage_result(numbers: dict, artifacts: list) -> None:
    """The matrix stage contract: JSON {"numbers", "artifacts"} at $OPFORGE_STAGE_RESULT if set."""
    path = os.environ.get("OPFORGE_STAGE_RESULT")
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps({"numbers": _json_safe(numbers),
                                          "artifacts": [str(a) for a in artifacts]}, indent=1))
