"""The report of a run: JSON (--json), a readable report.md with an error histogram per diverging
tensor (--report DIR; plots need matplotlib), and the summary printed on the terminal."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np

from .compare import ulp_errors

MAX_PLOTS = 20


def as_dict(report) -> dict:
    first = report.first_divergence
    return _safe({
        "model": report.model, "ok": report.ok, "runtimes": report.runtimes,
        "baseline": report.baseline, "subjects": report.subjects,
        "all_tensors": report.all_tensors, "inputs": report.inputs,
        "skipped_runtimes": report.skipped_runtimes, "notes": report.notes,
        "saved_outputs": report.saved or None,
        "first_divergence": None if first is None else {
            "tensor": first.tensor, "node": first.node, "op": first.op, "output": first.output,
            "subject": first.subject, "baseline": first.baseline},
        "tensors": _tensors(report), "timings_s": report.timings_s,
    })


def _tensors(report) -> list:
    """One entry per tensor, in topological order: its name and its comparison (the worst one
    when several runtimes are compared, all of them under "comparisons")."""
    grouped: dict = {}
    for r in report.results:
        grouped.setdefault(r.tensor, []).append(_one(r))
    out = []
    for name, entries in grouped.items():
        worst = min(entries, key=lambda e: (e["ok"] is not False, -(e.get("max_ulp") or 0.0)))
        out.append({"name": name, **worst, **({"comparisons": entries} if len(entries) > 1 else {})})
    return out


def _one(r) -> dict:
    entry = {"node": r.node, "op": r.op, "output": r.output, "order": r.order, "subject": r.subject,
             "baseline": r.baseline, "dtype": r.dtype, "shape": r.shape, "ok": r.ok}
    if r.tolerance is not None:
        entry.update(r.tolerance.as_dict())
    if r.metrics is None:
        return {**entry, "missing": r.missing}
    m = r.metrics
    entry.update({"max_abs": m.max_abs, "max_rel": m.max_rel, "max_ulp": m.max_ulp,
                  "p99_ulp": m.p99_ulp, "mismatched": m.mismatched,
                  "worst": {"index": list(m.worst_index), "value": m.worst_value,
                            "expected": m.worst_expected}})
    if m.detail:
        entry["detail"] = m.detail
    if m.quantized:  # judged in quantization steps (max_ulp: the largest error in steps)
        entry.update({"quantized": m.quantized, "off_by_one": m.off_by_one})
    return entry


def _safe(obj):
    """JSON without NaN/Infinity literals: non-finite numbers as the strings "nan", "inf"."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, dict):
        return {k: _safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_safe(v) for v in obj]
    return obj


def write_json(report, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(as_dict(report), indent=1))


def summary(report) -> str:
    compared = [r for r in report.results if r.metrics is not None]
    bad = [r for r in report.results if r.ok is False]
    against = " vs ".join([", ".join(report.subjects) or "-", report.baseline])
    lines = [(f"{report.model}: {against}: {len(compared)} tensor comparison(s), "
              f"{len(bad)} out of tolerance")]
    for name, why in report.skipped_runtimes.items():
        lines.append(f"  skipped {name}: {why}")
    lines += [f"  note: {note}" for note in report.notes]
    lines += [f"  {r.tensor!r} ({r.subject}): {_steps_text(r.metrics)}" for r in compared
              if r.metrics.quantized and r.metrics.off_by_one]
    first = report.first_divergence
    if first is not None:
        lines.append(f"  first divergence: {first.tensor!r} (node {first.node}, {_op_text(first)}) "
                     f"in {first.subject}: {_worst_text(first)}")
    if report.saved:
        lines.append(f"  saved {report.saved}")
    return "\n".join(lines)


def _op_text(r) -> str:
    """The op and, for a node of several outputs, which one: "opforge::AddRMSNorm output H"."""
    return f"{r.op} output {r.output}" if r.output else r.op


def _steps_text(m) -> str:
    return f"{m.off_by_one} element(s) one {m.quantized} quantization step off (allowed)"


def _worst_text(r) -> str:
    if r.metrics is None:
        return r.missing
    m = r.metrics
    if m.detail:
        return m.detail
    if m.quantized:
        return (f"{m.mismatched} element(s) more than one {m.quantized} quantization step off "
                f"({m.off_by_one} one step off); max {m.max_ulp:.3g} steps, max abs {m.max_abs:.3g}; worst at "
                f"{list(m.worst_index)}: got {m.worst_value!r}, expected {m.worst_expected!r}")
    return (f"{m.mismatched} element(s) outside rtol={r.tolerance.rtol:.3g} atol={r.tolerance.atol:.3g}"
            f"; max abs {m.max_abs:.3g}, max rel {m.max_rel:.3g}, max {m.max_ulp:.3g} ulp; worst at "
            f"{list(m.worst_index)}: got {m.worst_value!r}, expected {m.worst_expected!r}")


def write_markdown(report, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    plots = _plots(report, folder)
    first = report.first_divergence
    lines = [f"# opforge-align: {report.model}", "",
             f"- verdict: **{'ok' if report.ok else 'MISMATCH'}**",
             f"- compared: {', '.join(report.subjects) or '-'} against {report.baseline}",
             f"- tensors: {'every intermediate' if report.all_tensors else 'graph outputs'}",
             "- inputs: " + ", ".join(f"{k} {v['dtype']}{v['shape']}" for k, v in report.inputs.items()),
             "- first divergence: " + ("none" if first is None else
                                       f"`{first.tensor}` (node `{first.node}`, "
                                       f"{_op_text(first)}, {first.subject})")]
    lines += [f"- skipped {k}: {v}" for k, v in report.skipped_runtimes.items()]
    lines += [f"- note: {note}" for note in report.notes]
    header = ("| # | tensor | op | runtime | dtype | shape | max abs | max rel | max ulp | "
              "p99 ulp | worst: got / expected [index] | rtol, atol | ok |")
    lines += ["", header, "|" + "---|" * 13]
    for r in report.results:
        lines.append(_row(r))
    if plots:
        lines += ["", "## Error of the diverging tensors (ULP of the runtime's dtype)", ""]
        lines += [f"![{name}]({path.name})" for name, path in plots]
    lines.append("")
    path = folder / "report.md"
    path.write_text("\n".join(lines))
    return path


def _row(r) -> str:
    ok = {True: "ok", False: "**NO**", None: "-"}[r.ok]
    tol = f"{r.tolerance.rtol:.3g}, {r.tolerance.atol:.3g}" if r.tolerance else "-"
    if r.metrics is None or r.metrics.detail:
        why = r.missing if r.metrics is None else r.metrics.detail
        return (f"| {r.order} | `{r.tensor}` | {_op_text(r)} | {r.subject} | {r.dtype} | {r.shape} | "
                f"{why} |  |  |  |  | {tol} | {ok} |")
    m = r.metrics
    worst = f"{m.worst_value:.9g} / {m.worst_expected:.9g} {list(m.worst_index)}" \
        if m.worst_value is not None else "-"
    if m.quantized:  # the ulp columns hold quantization steps; the tolerance is one step
        tol = f"1 {m.quantized} step ({m.off_by_one} one step off)"
    return (f"| {r.order} | `{r.tensor}` | {_op_text(r)} | {r.subject} | {r.dtype} | {r.shape} | "
            f"{m.max_abs:.3g} | {m.max_rel:.3g} | {m.max_ulp:.3g} | {m.p99_ulp:.3g} | {worst} | "
            f"{tol} | {ok} |")


def _plots(report, folder: Path) -> list:
    diverging = [r for r in report.results if r.ok is False and r.metrics is not None][:MAX_PLOTS]
    if not diverging:
        return []
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    made = []
    for r in diverging:
        errors = ulp_errors(report.arrays[r.subject][r.tensor], report.arrays[r.baseline][r.tensor])
        if not errors.size:
            continue
        figure, axes = plt.subplots(figsize=(6, 3.2))
        axes.hist(np.log10(errors + 1e-3), bins=60)
        axes.set_xlabel("log10(error in ulp)")
        axes.set_ylabel("elements")
        axes.set_title(f"{r.tensor} ({_op_text(r)}, {r.subject} vs {r.baseline})", fontsize=9)
        figure.tight_layout()
        path = folder / f"error_{re.sub(r'[^A-Za-z0-9_.-]+', '_', r.tensor)}_{r.subject}.png"
        figure.savefig(path, dpi=80)
        plt.close(figure)
        made.append((r.tensor, path))
    return made
