"""Run the parts within the budget, each with its timeout and log, and judge each (pytest's JUnit, memcheck's errors, a GPU-less skip)."""
from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import re
import shlex
import signal
import subprocess
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from ci.gpucheck.common import (
    BENCH_MARGIN_S,
    MIN_PART_S,
    NO_GPU_SKIP,
    REPO,
    REPORT_RESERVE_S,
    progress,
)
from ci.gpucheck.plan import Layout, Part
from ci.gpucheck.probe import Probe


@dataclasses.dataclass
class Result:
    name: str
    status: str                  # pass | fail | skipped
    detail: str = ""
    seconds: float = 0.0
    numbers: dict = dataclasses.field(default_factory=dict)
    log: str = ""


def blocked(part: Part, done: dict) -> str:
    for name in part.after:
        if done[name].status != "pass":
            why = f" ({done[name].detail})" if done[name].status == "skipped" else ""
            return f"{name} {'failed' if done[name].status == 'fail' else 'skipped'}{why}"
    return ""


def execute(parts: list, layout: Layout, probe_: Probe, *, budget_s: float) -> list:
    """Every part, group by group (the parts of a group at once), within the budget."""
    deadline = time.monotonic() + budget_s - REPORT_RESERVE_S
    done: dict[str, Result] = {}
    for group in sorted({part.group for part in parts}):
        ready: list[tuple[Part, int]] = []
        for part in (x for x in parts if x.group == group):
            left = deadline - time.monotonic()
            why = part.skip or blocked(part, done) or (
                f"the {budget_s:.0f} s budget was spent before it could start" if left < MIN_PART_S else "")
            if why:
                done[part.name] = Result(part.name, "skipped", why)
                progress(f"{part.name}: skipped: {why}")
            else:
                ready.append((part, int(min(part.budget_s, left))))
        with concurrent.futures.ThreadPoolExecutor(max(1, len(ready))) as pool:
            for result in pool.map(lambda job: run_part(job[0], job[1], layout, probe_), ready):
                done[result.name] = result
    return [done[part.name] for part in parts]


def run_part(part: Part, timeout: int, layout: Layout, probe_: Probe) -> Result:
    log = layout.work / "logs" / f"{part.name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    command = [a.replace("{time_limit}", str(max(10, timeout - BENCH_MARGIN_S))) for a in part.command]
    progress(f"{part.name}: start (budget {timeout} s)")
    started = time.monotonic()
    code = run_logged(command, {**os.environ, **dict(part.env)}, log, timeout)
    result = judge(part, code, probe_, layout, timeout)
    result.seconds, result.log = time.monotonic() - started, str(log)
    progress(f"{part.name}: {result.status} in {result.seconds:.0f} s"
             + (f": {result.detail}" if result.detail else ""))
    return result


def run_logged(command: list, env: dict, log: Path, timeout: int) -> int | None:
    """The exit code, or None when it ran past `timeout` (its whole process group is killed)."""
    with log.open("w") as out:
        out.write(f"$ {shlex.join(command)}\n")
        out.flush()
        try:
            proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as err:
            out.write(f"cannot start: {err}\n")
            return 127
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return None


def judge(part: Part, code: int | None, probe_: Probe, layout: Layout, timeout: int) -> Result:
    if code is None:
        return Result(part.name, "fail", f"timed out after {timeout} s (its budget)")
    if not part.junit:
        return Result(part.name, "pass" if code == 0 else "fail", "" if code == 0 else f"exited {code}")
    result = judge_pytest(part, code, probe_, layout.work / "junit" / f"{part.junit}.xml")
    if part.memcheck and result.status != "skipped":
        errors = memcheck_errors(layout.work / "logs" / f"{part.name}.log")
        result.numbers["memcheck_errors"] = errors
        if errors:
            result.status = "fail"
            result.detail = f"compute-sanitizer memcheck: {errors} errors (check.log); {result.detail}"
        else:
            result.detail = f"memcheck: 0 errors; {result.detail}"
    return result


def memcheck_errors(log: Path) -> int:
    """The errors compute-sanitizer's `ERROR SUMMARY: N errors` lines add up to."""
    text = log.read_text(errors="replace") if log.is_file() else ""
    return sum(int(n) for n in re.findall(r"ERROR SUMMARY: (\d+) error", text))


def junit_counts(path: Path) -> dict:
    """tests, failures (errors included), skipped, cuda_passed and the skip messages."""
    counts: dict[str, Any] = {"tests": 0, "failures": 0, "skipped": 0, "cuda_passed": 0, "skips": []}
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return counts
    for case in root.iter("testcase"):
        counts["tests"] += 1
        outcome = {child.tag: child for child in case}
        if "failure" in outcome or "error" in outcome:
            counts["failures"] += 1
        elif "skipped" in outcome:
            counts["skipped"] += 1
            counts["skips"].append(outcome["skipped"].get("message", ""))
        elif "cuda" in case.get("name", "").lower():
            counts["cuda_passed"] += 1
    return counts


def judge_pytest(part: Part, code: int, probe_: Probe, junit: Path) -> Result:
    counts = junit_counts(junit)
    numbers = {k: v for k, v in counts.items() if k != "skips"}
    summary = f"{counts['tests']} tests, {counts['failures']} failed, {counts['skipped']} skipped"
    if code == 5:
        if part.none_selected:
            return Result(part.name, "skipped", part.none_selected, numbers=numbers)
        return Result(part.name, "fail", "pytest selected no test", numbers=numbers)
    if code != 0:
        return Result(part.name, "fail", f"pytest exited {code}: {summary}", numbers=numbers)
    stray = [m for m in counts["skips"] if NO_GPU_SKIP.search(m)]
    if probe_.gpu and stray:
        return Result(part.name, "fail", f"{summary}; {len(stray)} skipped for 'no GPU' although "
                      f"torch sees {probe_.gpu}: {stray[0][:200]}", numbers=numbers)
    if probe_.gpu and part.needs_cuda_tests and not counts["cuda_passed"]:
        return Result(part.name, "fail", f"{summary}; no CUDA test passed", numbers=numbers)
    return Result(part.name, "pass", summary, numbers=numbers)
