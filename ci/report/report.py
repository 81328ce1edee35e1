"""build/matrix/report.json (cells x stages) and report.md, the page a person reads at a glance.

A stage's Result (ci/report/result.py) is typed: status pass | fail | skip, and a skip's reason.
report.json carries both fields as they are (`"status": "skip", "reason": "no GPU"`); report.md
and the progress lines show a skip as `skipped: <reason>`.
"""
from __future__ import annotations

import dataclasses
import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

from ci import model as mx
from ci.report.result import FAIL, PASS, SKIP, Result, label

# 2: status is pass | fail | skip with a skip's reason in `reason` (1 wrote "skipped: <reason>").
REPORT_FORMAT = 2
# report.json's summary counts (names unchanged since format 1)
SUMMARY_NAME = {PASS: "pass", FAIL: "fail", SKIP: "skipped"}
TAIL_LINES = 25
SHOWN_NUMBERS = 8


class ReportError(RuntimeError):
    """A report.json written by another run cannot be merged; the message names the file."""


@dataclasses.dataclass(frozen=True)
class Run:
    """One cell's results as another run (a CI job) wrote them."""
    path: Path                     # that run's report.json; its stage outputs lie beside it
    results: dict[str, Result]     # stage -> result


def read_runs(folder: Path, profile: str) -> dict[str, Run]:
    """cell id -> its results, from every report.json under folder (one per CI job's artifact).
    Log paths are moved to where the artifact now lies."""
    if not folder.is_dir():
        raise ReportError(f"--gather-from {folder}: not a folder")
    found: dict[str, Run] = {}
    for path in sorted(folder.rglob("report.json")):
        data = _read_report(path, profile)
        for cell in data["cells"]:
            if cell["id"] in found:
                raise ReportError(f"{path}: cell {cell['id']!r} again (also in "
                                  f"{found[cell['id']].path}): one report per cell")
            results = {name: _result(path, cell["id"], name, raw, data["report"])
                       for name, raw in cell["stages"].items()}
            found[cell["id"]] = Run(path, results)
    if not found:
        raise ReportError(f"--gather-from {folder}: no report.json below it (expected one per "
                          "CI job's artifact, e.g. results-<cell>/report.json)")
    return found


def _read_report(path: Path, profile: str) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ReportError(f"{path}: unreadable report ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != REPORT_FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise ReportError(f"{path}: report format {found!r}, expected {REPORT_FORMAT}")
    missing = [key for key in ("profile", "report", "cells") if key not in data]
    if missing:
        raise ReportError(f"{path}: no {missing[0]!r} field (expected a report.json of nox -s matrix)")
    if data["profile"] != profile:
        raise ReportError(f"{path}: a run of profile {data['profile']!r}, expected {profile!r} "
                          "(the profile given with --profile)")
    return data


def _result(path: Path, cell: str, stage: str, raw: dict, report_dir: str) -> Result:
    fields = {k: v for k, v in raw.items() if k in Result.__annotations__ and k != "outputs"}
    try:
        result = Result(**fields)
    except (TypeError, ValueError) as exc:
        raise ReportError(f"{path}: cell {cell!r}, stage {stage}: {exc}") from None
    # logs and artifacts (report.md's links) beside the moved report.json
    result.log = result.log and _moved(result.log, report_dir, path.parent)
    result.artifacts = [_moved(a, report_dir, path.parent) for a in result.artifacts]
    return result


def _moved(written: str, report_dir: str, here: Path) -> str:
    """A path another run wrote under its report folder, now under `here` (as this run names
    paths: repository-relative inside it)."""
    prefix = report_dir.rstrip("/") + "/"
    if not written.startswith(prefix):
        return written
    moved = here / written[len(prefix):]
    return str(moved.relative_to(mx.REPO)) if moved.is_relative_to(mx.REPO) else str(moved)


def build_json(*, profile, matrix, host, cells, rows, excluded, duration_s, stages=None) -> dict:
    stages = list(matrix.stages if stages is None else stages)   # the stages the run selected
    out_cells = []
    for index, (cell, row) in enumerate(zip(cells, rows), 1):
        out_cells.append({"index": index, "id": cell.id, "values": dict(cell.values),
                          "settings": dict(cell.settings),
                          "stages": {name: result.to_json() for name, result in row.items()}})
    results = [r for row in rows for r in row.values()]
    summary = Counter(SUMMARY_NAME[r.status] for r in results)
    summary.update(f"origin.{r.origin}" for r in results)
    return {"format": REPORT_FORMAT, "profile": profile,
            "description": matrix.profiles[profile].description,
            "written": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "duration_s": round(duration_s, 1),
            "complete": len(rows) == len(cells), "host": host.to_json(), "stages": stages,
            "axes": list(mx.AXES), "summary": dict(sorted(summary.items())),
            "cells": out_cells,
            "excluded": [{"id": e.id, "values": dict(e.values), "rule": e.rule, "why": e.why,
                          "condition": e.condition} for e in excluded]}


def tail(path: str | None, root: Path, lines: int = TAIL_LINES) -> str:
    if not path:
        return "(no log)"
    try:
        text = (root / path).read_text(errors="replace").rstrip().splitlines()
    except OSError:
        return f"(log {path} unreadable)"
    return "\n".join(text[-lines:])


def render_md(report: dict, root: Path) -> str:
    stages = report["stages"]
    cells = report["cells"]
    s = report["summary"]
    failed = [(c, name, r) for c in cells for name, r in c["stages"].items() if r["status"] == FAIL]
    verdict = "FAILED" if failed else "passed" if report["complete"] else "INCOMPLETE"
    counts = (f"{len(cells)} cells × {len(stages)} stages in {report['duration_s'] / 60:.1f} min: "
              f"**{s.get('pass', 0)} pass, {s.get('fail', 0)} fail, {s.get('skipped', 0)} skipped** "
              f"(stage runs: {s.get('origin.run', 0)} executed, {s.get('origin.cached', 0)} cached "
              f"from an earlier run, {s.get('origin.reused', 0)} reused from another cell). "
              f"Host: Python {report['host']['python']}, {report['host']['glibc']}, "
              f"GPU: {'yes' if report['host']['gpu']['ok'] else 'no'}.")
    lines = [f"# opforge matrix: profile `{report['profile']}` — {verdict}", "",
             f"{report['description']}", "", counts, ""]
    lines += ["## Stages", "", "| stage | pass | fail | skipped | executed | reused | cached | time | CPU |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name in stages:
        rs = [c["stages"][name] for c in cells if name in c["stages"]]
        count = Counter(r["status"] for r in rs)
        origin = Counter(r["origin"] for r in rs)
        seconds = sum(r["duration_s"] for r in rs)
        cpu = sum(r.get("cpu_s", 0.0) for r in rs)  # absent from reports written before it
        lines.append(f"| {name} | {count[PASS]} | {count[FAIL]} | {count[SKIP]} | "
                     f"{origin['run']} | {origin['reused']} | {origin['cached']} | {seconds:.0f} s | "
                     f"{cpu:.0f} s |")
    lines.append("")
    if failed:
        lines += ["## Failures", ""]
        seen = set()
        for cell, name, result in failed:
            if result["key"] in seen:
                continue
            seen.add(result["key"])
            same = sum(1 for _, n, r in failed if r["key"] == result["key"])
            lines += [f"### {name} — cell {cell['index']}: `{cell['id']}`"
                      + (f" (and {same - 1} cells reusing it)" if same > 1 else ""), "",
                      f"{result['detail']}" if result["detail"] else "",
                      f"log: [{result['log']}]({_rel(result['log'])})" if result["log"]
                      else "log: none", "", "```",
                      tail(result["log"], root), "```", ""]
    skips = Counter(r["reason"] for c in cells for r in c["stages"].values() if r["status"] == SKIP)
    if skips:
        lines += ["## Skipped", "", "| reason | stage results |", "| --- | ---: |"]
        lines += [f"| {reason} | {count} |" for reason, count in skips.most_common()]
        lines.append("")
    lines += _numbers(cells)
    plots = sorted({a for c in cells for r in c["stages"].values() for a in r["artifacts"]
                    if a.endswith(".png")})
    if plots:
        lines += ["## Plots", ""] + [f"- [{a}]({_rel(a)})" for a in plots] + [""]
    legend = ("✓ pass, ✗ fail, ↺ reused from another cell, ◆ cached from an earlier run, "
              "– skipped (reason above).")
    lines += ["## Cells", "", legend, "",
              "| # | " + " | ".join(report["axes"]) + " | " + " | ".join(stages) + " |",
              "| ---: | " + " | ".join("---" for _ in report["axes"]) + " | "
              + " | ".join(":-:" for _ in stages) + " |"]
    for cell in cells:
        marks = [_mark(cell["stages"].get(name)) for name in stages]
        lines.append(f"| {cell['index']} | " + " | ".join(cell["values"][a] for a in report["axes"])
                     + " | " + " | ".join(marks) + " |")
    lines.append("")
    if report["excluded"]:
        lines += ["## Excluded (by rules or the profile's exclude)", "",
                  "| combination | by | condition |", "| --- | --- | --- |"]
        lines += [f"| `{e['id']}` | {e['rule']}: {e['why']} | `{e['condition']}` |"
                  for e in report["excluded"]]
        lines.append("")
    return "\n".join(lines)


def _mark(result: dict | None) -> str:
    if result is None:
        return ""
    if result["status"] == FAIL:
        return "✗"
    if result["status"] == SKIP:
        return "–"
    return {"reused": "↺", "cached": "◆"}.get(result["origin"], "✓")


def _rel(path: str) -> str:
    """Links in report.md are relative to build/matrix/ (paths are repository-relative or absolute)."""
    if os.path.isabs(path):
        return path
    return path.removeprefix("build/matrix/") if path.startswith("build/matrix/") else f"../../{path}"


def _numbers(cells: list[dict]) -> list[str]:
    rows, seen = [], set()
    for cell in cells:
        for name, result in cell["stages"].items():
            if result["origin"] not in ("run", "cached") or result["key"] in seen:
                continue
            seen.add(result["key"])
            if result["numbers"] or result["detail"] or result["artifacts"]:
                numbers = _headline(result["numbers"])
                files = " ".join(f"[{Path(a).name}]({_rel(a)})" for a in result["artifacts"]
                                 if a.endswith(".md"))
                status = label(result["status"], result["reason"])
                rows.append(f"| {name} | {cell['index']} | {status} | {result['duration_s']:.1f} s | "
                            f"{result['detail']} {files} | {numbers} |")
    if not rows:
        return []
    return ["## Results (each distinct stage run once)", "",
            "| stage | cell | status | time | detail | numbers |",
            "| --- | ---: | --- | ---: | --- | --- |", *rows, ""]


def _headline(numbers: dict[str, Any]) -> str:
    """The first few numbers, short names first; the rest are in report.json."""
    keys = sorted(numbers, key=lambda k: (k.count("."), k))
    top = [k for k in keys if k.count(".") <= 1][:SHOWN_NUMBERS] or keys[:4]
    shown = [f"{k}={str(numbers[k])[:40]}" for k in top]
    if len(keys) > len(top):
        shown.append(f"… {len(keys) - len(top)} more in report.json")
    return ", ".join(shown)


def write(out: Path, **kw) -> dict:
    # the repository: logs are repository-relative when out is inside it (build/<name>)
    root = mx.REPO if out.is_relative_to(mx.REPO) else out.parent.parent
    data = build_json(**kw)
    data["report"] = str(out.relative_to(mx.REPO)) if out.is_relative_to(mx.REPO) else str(out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "report.json.tmp"
    tmp.write_text(json.dumps(data, indent=1, default=str) + "\n")
    tmp.replace(out / "report.json")
    (out / "report.md").write_text(render_md(data, root) + "\n")
    return data


def distinct_runs(data: dict[str, Any]) -> list[tuple[dict, str, dict]]:
    """(cell, stage, result) of each stage run once (executed or cached), in report order."""
    seen, out = set(), []
    for cell in data["cells"]:
        for name, result in cell["stages"].items():
            if result["origin"] in ("run", "cached") and result["key"] not in seen:
                seen.add(result["key"])
                out.append((cell, name, result))
    return out


def pytest_tally(data: dict[str, Any], matrix: mx.Matrix) -> dict[str, Any]:
    """Tests passed / failed / skipped over the distinct pytest runs (from their JUnit numbers);
    `unfinished`: pytest stages that failed without a JUnit report (crash, timeout)."""
    tally: dict[str, Any] = {"passed": 0, "failed": 0, "skipped": 0, "suites": 0, "unfinished": []}
    for cell, name, result in distinct_runs(data):
        if matrix.stages[name].kind != "pytest":
            continue
        tally["suites"] += 1
        numbers = result["numbers"]
        if "tests" not in numbers:
            if result["status"] == FAIL:
                tally["unfinished"].append(f"{name} (cell {cell['index']})")
            continue
        failed, skipped = numbers.get("failures", 0), numbers.get("skipped", 0)
        tally["failed"] += failed
        tally["skipped"] += skipped
        tally["passed"] += numbers["tests"] - failed - skipped
    return tally


def summary_lines(data: dict[str, Any], matrix: mx.Matrix) -> list[str]:
    """What the end of a run prints: counts, the tests' tally, each failure with its log."""
    s = data["summary"]
    counts = (f"opforge matrix: {len(data['cells'])} cells, {s.get('pass', 0)} pass, "
              f"{s.get('fail', 0)} fail, {s.get('skipped', 0)} skipped; {s.get('origin.run', 0)} "
              f"stage runs executed, {s.get('origin.cached', 0)} cached, "
              f"{s.get('origin.reused', 0)} reused; {data['duration_s'] / 60:.1f} min")
    lines = [counts]
    tally = pytest_tally(data, matrix)
    if tally["suites"]:
        lines.append(f"tests: {tally['passed']} passed, {tally['failed']} failed, "
                     f"{tally['skipped']} skipped ({tally['suites']} suites)")
    if tally["unfinished"]:
        lines.append(f"suites that did not finish (crash or timeout): {', '.join(tally['unfinished'])}")
    for cell, name, result in distinct_runs(data):
        if result["status"] == FAIL:
            lines.append(f"FAILED {name} (cell {cell['index']}: {cell['id']}): "
                         f"{result['detail'][:200]}; log {result['log']}")
    lines.append(f"report: {data['report']}/report.md and report.json")
    return lines


def exit_code(data: dict[str, Any]) -> int:
    return 1 if data["summary"].get("fail", 0) or not data["complete"] else 0
