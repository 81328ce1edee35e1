"""OUT/report.md, report.json and check.log from the parts' results; the whole check."""
from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

from ci.gpucheck import folders
from ci.gpucheck.common import LOG_TAIL_BYTES, bench_report, progress
from ci.gpucheck.execute import execute
from ci.gpucheck.plan import Layout, machine_line, plan
from ci.gpucheck.probe import Probe, probe

REPORT_FILES = ("report.md", "report.json", "check.log")


def bench_targets(results: list, layout: Layout) -> tuple:
    """(targets, bench data or None, why no target is listed): the bench's own, else every target
    skipped with the reason the bench did not run."""
    bench = next(r for r in results if r.name == "bench")
    path = layout.bench / "bench.json"
    if bench.status == "pass" and path.is_file():
        data = json.loads(path.read_text())
        return data["targets"], data, ""
    why = bench.detail if bench.status == "skipped" else f"the bench failed ({bench.detail})"
    try:
        gpu_report = bench_report()
    except ImportError as err:   # the op names come from opforge_spec, which needs numpy
        return [], None, f"the bench's report cannot be imported here ({type(err).__name__}: {err})"
    return gpu_report.skipped_targets(gpu_report.spec_ops(), why), None, ""


def target_table(targets: list) -> list:
    """The targets as a markdown table, as bench/opforge_bench/gpu_report.py writes it (it needs
    numpy; this does not)."""
    lines = ["| target | bar | measured | status | detail |", "|---|---|---|---|---|"]
    for t in targets:
        measured = f"{t['ratio']:.2f}x" if "ratio" in t else "-"
        lines.append(f"| {t['target']} | {t['bar']}x | {measured} | **{t['status']}** | "
                     f"{t.get('detail', '')} |")
    return lines


def overall(results: list) -> str:
    if any(r.status == "fail" for r in results):
        return "fail"
    return "pass" if any(r.status == "pass" for r in results) else "skipped"


def report_json(p: Probe, parts: list, results: list, targets: list, unlisted: str = "") -> dict:
    return {"status": overall(results), "machine": dataclasses.asdict(p),
            "parts": [{**dataclasses.asdict(r), "what": part.what, "command": list(part.command)}
                      for part, r in zip(parts, results)],
            "targets": targets, **({"targets_unlisted": unlisted} if unlisted else {})}


def report_markdown(p: Probe, parts: list, results: list, targets: list, bench,
                    unlisted: str = "") -> str:
    title = {"pass": "passed", "fail": "FAILED", "skipped": "nothing ran"}[overall(results)]
    carried = (f"- carried: {', '.join(p.carried_wheels) or 'no wheels'}; ORT headers "
               f"{p.ort_include or 'none'}")
    lines = [f"# opforge GPU check: {title}", "", f"- machine: {machine_line(p)}", carried, "",
             "## Parts", "", "| part | what | status | time | detail |", "|---|---|---|---|---|"]
    for part, r in zip(parts, results):
        status = f"skipped: {r.detail}" if r.status == "skipped" else f"**{r.status}**"
        detail = "" if r.status == "skipped" else r.detail
        lines.append(f"| {part.name} | {part.what} | {status} | {r.seconds:.0f} s | {detail} |")
    lines += ["", "## GPU bench targets", "", *target_table(targets), ""]
    if unlisted:
        lines += [f"No target is listed: {unlisted}.", ""]
    if bench:
        lines += ["Tables, peers and plots: [bench/bench.md](bench/bench.md). Peers: "
                  + "; ".join(f"{k}: {v}" for k, v in bench["peers"].items()), ""]
    lines += ["Logs of every part: check.log.", ""]
    return "\n".join(lines)


def write_log(results: list, path: Path) -> None:
    with path.open("w") as out:
        for r in results:
            out.write(f"===== {r.name}: {r.status} {r.detail}\n")
            if r.log and Path(r.log).is_file():
                data = Path(r.log).read_bytes()
                if len(data) > LOG_TAIL_BYTES:
                    out.write(f"[... the first {len(data) - LOG_TAIL_BYTES} bytes left out]\n")
                out.write(data[-LOG_TAIL_BYTES:].decode("utf-8", "replace"))
            out.write("\n")


def write_report(p: Probe, parts: list, results: list, layout: Layout) -> list:
    targets, bench, unlisted = bench_targets(results, layout)
    layout.out.mkdir(parents=True, exist_ok=True)
    (layout.out / "report.json").write_text(json.dumps(
        report_json(p, parts, results, targets, unlisted), indent=1))
    (layout.out / "report.md").write_text(report_markdown(p, parts, results, targets, bench,
                                                          unlisted))
    write_log(results, layout.out / "check.log")
    written = [layout.out / name for name in REPORT_FILES] + sorted(layout.bench.rglob("*"))
    return sorted(str(f.relative_to(layout.out)) for f in written if f.is_file())


def claim_folders(layout: Layout) -> None:
    """--work and OUT made the check's own (refused where they are not theirs to take), --work
    emptied, and what an earlier check wrote into OUT removed; nothing else."""
    folders.claim(layout.work, "--work")
    folders.claim(layout.out, "OUT")
    folders.empty(layout.work)
    folders.remove_own(layout.out, (layout.bench.name, *REPORT_FILES))


def check(layout: Layout, *, budget_s: float) -> int:
    started = time.monotonic()
    p = probe(layout.carried)
    claim_folders(layout)
    progress(f"machine: {machine_line(p)}")
    parts = plan(p, layout)
    results = execute(parts, layout, p, budget_s=budget_s - (time.monotonic() - started))
    files = write_report(p, parts, results, layout)
    status = overall(results)
    progress(f"{status}: wrote {', '.join(files)} in {layout.out}")
    return 1 if status == "fail" else 0
