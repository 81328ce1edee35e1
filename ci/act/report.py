"""act's JSON log (`act --json`) -> one row per job and step of the plan: ran, replaced (why),
skipped (why), failed or not reached, with times; report.md and report.json from those rows.

act writes one JSON object per line: `jobID`, `matrix`, `stepID` (the step's index; a composite
action's inner steps add theirs), `stage` (Pre, Main, Post), `stepResult` with `executionTime`
(nanoseconds) when a step ends, `raw_output` lines, `jobResult` when a job ends.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ci.act.plan import Job, Plan

TAIL = 15           # output lines kept per step, shown for a failed one
SETUP = "Set up job"
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")   # colours in the steps' output


@dataclass
class StepRun:
    result: str = "running"         # success | failure | skipped (act's words)
    main: bool = False              # its Main stage started
    seconds: float = 0.0
    output: list[str] = field(default_factory=list)
    error: str = ""


@dataclass
class JobRun:
    result: str = "running"
    started: str = ""
    ended: str = ""
    steps: dict[str, StepRun] = field(default_factory=dict)     # by act's stepID
    setup: StepRun = field(default_factory=StepRun)

    @property
    def seconds(self) -> float:
        if not (self.started and self.ended):
            return 0.0
        return (_time(self.ended) - _time(self.started)).total_seconds()


def _time(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


RunKey = tuple[str, str]    # (job id, matrix id or "")


def read_events(lines: Iterable[str]) -> dict[RunKey, JobRun]:
    """Every job run act reported, by (job id, matrix id)."""
    runs: dict[RunKey, JobRun] = {}
    for line in lines:
        event = _event(line)
        if event is None or "jobID" not in event:
            continue
        key = (str(event["jobID"]), str((event.get("matrix") or {}).get("id", "")))
        _apply(runs.setdefault(key, JobRun()), event)
    return runs


def _event(line: str) -> dict[str, Any] | None:
    try:
        event = json.loads(line)
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


def _apply(run: JobRun, event: Mapping[str, Any]) -> None:
    run.started = run.started or str(event.get("time", ""))
    run.ended = str(event.get("time", run.ended))
    if "jobResult" in event:
        run.result = str(event["jobResult"])
        return
    step = _step_of(run, event)
    if step is None:
        return
    step.main = step.main or event.get("stage") == "Main"
    if event.get("raw_output"):
        text = ANSI.sub("", str(event.get("msg", "")))
        step.output = (step.output + text.splitlines())[-TAIL:]
    elif event.get("level") == "error":
        step.error = str(event.get("msg", ""))
    if "stepResult" in event and _is_top_level(event):
        _record_result(step, event)


def _step_of(run: JobRun, event: Mapping[str, Any]) -> StepRun | None:
    ids = event.get("stepID") or []
    if ids:
        return run.steps.setdefault(str(ids[0]), StepRun())
    if event.get("step") == SETUP:
        return run.setup
    return None


def _is_top_level(event: Mapping[str, Any]) -> bool:
    return len(event.get("stepID") or event.get("stepid") or []) <= 1


def _record_result(step: StepRun, event: Mapping[str, Any]) -> None:
    result = str(event["stepResult"])
    step.seconds += float(event.get("executionTime", 0)) / 1e9   # Pre + Main + Post
    if result == "failure":
        step.result = "failure"
    elif step.result != "failure" and event.get("stage", "Main") == "Main":
        step.result = result


# ---------------------------------------------------------------------------------------- rows


@dataclass(frozen=True)
class Row:
    workflow: str
    job: str            # job id, `[matrix id]` for a matrix job
    step: str           # a step's label; "" for the job's own row
    status: str         # ran | replaced | skipped | failed | not reached | left
    why: str
    seconds: float


def job_rows(job: Job, run: JobRun | None, matrix_id: str, left: str) -> list[Row]:
    """The job's own row, then one per step."""
    name = f"{job.job_id}[{matrix_id}]" if matrix_id else job.job_id
    if run is None:
        return [Row(job.workflow, name, "", "left", left, 0.0)]
    status, why = _job_status(job, run)
    rows = [Row(job.workflow, name, "", status, why, run.seconds)]
    if run.setup.result == "failure":
        rows.append(Row(job.workflow, name, SETUP, "failed", _failure(run.setup), 0.0))
    for step in job.steps:
        rows.append(_step_row(job, name, step.index, run.steps.get(step.step_id), run.result))
    return rows


def _job_status(job: Job, run: JobRun) -> tuple[str, str]:
    if run.result == "failure":
        return "failed", "a step failed"
    if run.result == "skipped":
        return "skipped", "its if: was false"
    if run.result == "running":
        return "failed", "interrupted: act ended before the job did"
    if run.result != "success":
        return "failed", f"act ended the job as {run.result}"
    if job.skipped:
        return "skipped", job.skipped
    return "ran", ""


def _step_row(job: Job, name: str, index: int, run: StepRun | None, job_result: str) -> Row:
    step = job.steps[index]
    if (run is None or run.result == "running") and job_result == "success":
        # act logs a step its `if:` skips only at debug level: no event at all
        return Row(job.workflow, name, step.label, "skipped", "its if: was false", 0.0)
    if run is not None and run.main and run.result == "running" and job_result == "running":
        return Row(job.workflow, name, step.label, "failed",
                   "interrupted: act ended before the step did", run.seconds)
    if run is None or run.result == "running":
        return Row(job.workflow, name, step.label, "not reached", "an earlier step failed", 0.0)
    if run.result == "failure":
        return Row(job.workflow, name, step.label, "failed", _failure(run), run.seconds)
    if run.result == "skipped":
        return Row(job.workflow, name, step.label, "skipped", "its if: was false", run.seconds)
    if job.skipped and step.replacement and step.replacement.why == job.skipped:
        return Row(job.workflow, name, step.label, "skipped", job.skipped, run.seconds)
    if step.replacement:
        return Row(job.workflow, name, step.label, "replaced", step.replacement.why, run.seconds)
    return Row(job.workflow, name, step.label, "ran", "", run.seconds)


def _failure(run: StepRun) -> str:
    return run.error or "failed"


def rows_for(plan: Plan, runs_by_workflow: Mapping[str, Mapping[RunKey, JobRun]],
             left: Mapping[str, str]) -> list[Row]:
    """Every planned job (each selected cell of a matrix job) with its steps, in plan order.
    left: job key -> why it was not run (not selected)."""
    rows: list[Row] = []
    for job in plan.jobs:
        runs = runs_by_workflow.get(job.workflow, {})
        why_left = left.get(job.key, "not run: a job it needs did not succeed")
        for matrix_id in job.matrix_ids or ("",):
            rows += job_rows(job, runs.get((job.job_id, matrix_id)), matrix_id, why_left)
    return rows


def failures(rows: Iterable[Row]) -> list[Row]:
    """The failed steps and the failed jobs (a job act ended without a result has no failed step)."""
    return [row for row in rows if row.status == "failed"]


def failure_lines(rows: Iterable[Row], runs_by_workflow: Mapping[str, Mapping[RunKey, JobRun]]
                  ) -> list[str]:
    """One line per failed step naming workflow, job and step, then the end of its output."""
    lines = []
    for row in failures(rows):
        where = f", step {row.step!r}" if row.step else ""
        if not row.step and any(r.step and r.job == row.job for r in failures(rows)):
            continue                  # its failed step says it
        lines.append(f"opforge act: FAILED {row.workflow} job {row.job}{where}: {row.why}")
        lines += [f"    {text}" for text in _output_of(row, runs_by_workflow)]
    return lines


def _output_of(row: Row, runs_by_workflow: Mapping[str, Mapping[RunKey, JobRun]]) -> list[str]:
    job_id, _, matrix = row.job.partition("[")
    run = runs_by_workflow.get(row.workflow, {}).get((job_id, matrix.rstrip("]")))
    if run is None:
        return []
    if row.step == SETUP:
        return run.setup.output
    return next((step.output for step in run.steps.values() if step.result == "failure"), [])


# -------------------------------------------------------------------------------------- render


def _duration(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if minutes else f"{seconds:.1f} s"


def markdown(rows: list[Row], total_seconds: float, notes: Iterable[str] = ()) -> str:
    failed = failures(rows)
    verdict = "FAILED" if failed else "passed"
    counts: dict[str, int] = {}
    for row in rows:
        if row.step:
            counts[row.status] = counts.get(row.status, 0) + 1
    lines = ["# The workflows under act (nox -s act)", "",
             f"**{verdict}** in {_duration(total_seconds)}: "
             + ", ".join(f"{count} {status}" for status, count in sorted(counts.items())), ""]
    lines += [f"- {note}" for note in notes]
    lines += ["", "| workflow | job | step | status | time | why |", "| --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        step = row.step or "**(job)**"
        lines.append(f"| {row.workflow} | {row.job} | {step} | {row.status} | "
                     f"{_duration(row.seconds)} | {row.why} |")
    return "\n".join(lines) + "\n"


def as_json(rows: list[Row], total_seconds: float, notes: Iterable[str] = ()) -> str:
    return json.dumps({"format": 1, "passed": not failures(rows), "seconds": round(total_seconds, 1),
                       "notes": list(notes),
                       "rows": [row.__dict__ for row in rows]}, indent=1) + "\n"
