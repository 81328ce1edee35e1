"""What the local act run does with every job and step of the generated workflows, and why.

A `run:` step runs as written. A `uses:` step whose action cannot be had offline is replaced: act
runs a stand-in from ci/act/standins/ in its place (`--local-repository`, named on act's command
line), which moves the same files by local means or, for GitHub-only services, says what it would
have done; actions/checkout is act's own local copy of the working tree. A job that needs GitHub
itself (OIDC) is planned and skipped by its stand-in, naming why.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

STANDINS = Path(__file__).resolve().parent / "standins"
ACT_CHECKOUT = ("act copies the working tree into the job (its local checkout of the repository): "
                "nothing is fetched")
ARTIFACTS = ("the action's JavaScript bundle is fetched from GitHub and talks to GitHub's artifact "
             "service: the stand-in moves the same files through the local artifact store")
OIDC = ("needs GitHub's OIDC token (id-token: write) to sign with Sigstore: planned, not signed; "
        "the stand-in lists the files it would attest")
PUBLISH = ("trusted publishing needs GitHub's OIDC token and PyPI: the stand-in uploads the same "
           "packages-dir with twine to the local package index on 127.0.0.1")


@dataclass(frozen=True)
class Replacement:
    """A `uses:` action act does not fetch: the stand-in folder (None: act's own checkout)."""

    standin: str | None
    why: str


REPLACEMENTS: Mapping[str, Replacement] = {
    "actions/checkout": Replacement(None, ACT_CHECKOUT),
    "actions/upload-artifact": Replacement("upload-artifact", ARTIFACTS),
    "actions/download-artifact": Replacement("download-artifact", ARTIFACTS),
    "actions/attest-build-provenance": Replacement("attest-build-provenance", OIDC),
    "pypa/gh-action-pypi-publish": Replacement("gh-action-pypi-publish", PUBLISH),
}
# Jobs whose purpose is a GitHub-only service: planned, run by act (a later job needs them) with
# their GitHub step replaced by a stand-in that does nothing but say so.
SKIPPED_JOBS: Mapping[tuple[str, str], str] = {("release.yml", "attest"): OIDC}
# The cell matrix: at least one job per distinct value of these axes (issue 29).
COVERED_AXES = ("toolkit", "ort")


class PlanError(Exception):
    """A workflow the local run cannot handle (an action without a stand-in)."""


@dataclass(frozen=True)
class Step:
    index: int
    step_id: str               # act's stepID: the step's `id:`, else its index
    label: str                 # the step's name, else its `uses:` (as act names it)
    uses: str | None           # owner/repo@ref of a `uses:` step
    replacement: Replacement | None

    @property
    def planned(self) -> str:
        return "replaced" if self.replacement else "run"


@dataclass(frozen=True)
class Job:
    workflow: str              # file name under .github/workflows
    job_id: str
    name: str
    needs: tuple[str, ...]
    steps: tuple[Step, ...]
    matrix_ids: tuple[str, ...] = ()          # the cell ids selected (a matrix job)
    left_out_ids: tuple[str, ...] = ()        # the matrix's other cell ids (not run here)
    skipped: str | None = None                # why the job is planned and skipped
    in_container: bool = False                # `container:`: act runs it through a Docker API

    @property
    def key(self) -> str:
        return f"{self.workflow}:{self.job_id}"


@dataclass
class Plan:
    jobs: list[Job] = field(default_factory=list)

    def for_workflow(self, workflow: str) -> list[Job]:
        return [job for job in self.jobs if job.workflow == workflow]

    def standins(self) -> dict[str, str]:
        """`uses:` reference (owner/repo@sha) -> stand-in folder name, for act's command line."""
        return {step.uses: step.replacement.standin
                for job in self.jobs for step in job.steps
                if step.uses and step.replacement and step.replacement.standin}


def action_of(uses: str) -> str:
    """`owner/repo@ref` (or `owner/repo/path@ref`) -> `owner/repo`."""
    return "/".join(uses.split("@", 1)[0].split("/")[:2])


def plan_step(index: int, raw: Mapping[str, Any]) -> Step:
    uses = raw.get("uses")
    label = raw.get("name") or uses or str(raw.get("run", "")).splitlines()[0]
    step_id = str(raw.get("id", index))
    if not uses:
        return Step(index, step_id, label, None, None)
    action = action_of(uses)
    if action not in REPLACEMENTS:
        raise PlanError(f"opforge act: {uses}: no offline stand-in for this action (add one to "
                        f"ci/act/standins and ci/act/plan.py REPLACEMENTS)")
    return Step(index, step_id, label, uses, REPLACEMENTS[action])


def covering_entries(include: Sequence[Mapping[str, Any]],
                     axes: Sequence[str] = COVERED_AXES) -> list[Mapping[str, Any]]:
    """The first matrix entries that together cover every distinct value of each axis."""
    wanted = {(axis, str(entry[axis])) for entry in include for axis in axes}
    chosen = []
    for entry in include:
        covers = {(axis, str(entry[axis])) for axis in axes} & wanted
        if covers:
            chosen.append(entry)
            wanted -= covers
    return chosen


def plan_job(workflow: str, job_id: str, raw: Mapping[str, Any]) -> Job:
    needs = raw.get("needs") or ()
    include = raw.get("strategy", {}).get("matrix", {}).get("include", [])
    chosen = tuple(str(entry["id"]) for entry in covering_entries(include))
    return Job(workflow=workflow, job_id=job_id, name=str(raw.get("name", job_id)),
               needs=(needs,) if isinstance(needs, str) else tuple(needs),
               steps=tuple(plan_step(i, step) for i, step in enumerate(raw.get("steps", []))),
               matrix_ids=chosen,
               left_out_ids=tuple(str(entry["id"]) for entry in include if str(entry["id"]) not in chosen),
               skipped=SKIPPED_JOBS.get((workflow, job_id)), in_container="container" in raw)


def load(workflows: Path, names: Iterable[str]) -> Plan:
    """The plan of the named workflow files (e.g. matrix.yml) under .github/workflows."""
    plan = Plan()
    for name in names:
        document = yaml.safe_load((workflows / name).read_text())
        plan.jobs += [plan_job(name, job_id, raw) for job_id, raw in document["jobs"].items()]
    return plan


def closure(plan: Plan, workflow: str, job_ids: Iterable[str]) -> set[str]:
    """The jobs act runs for `-j JOB`: the job and everything it needs, transitively."""
    jobs = {job.job_id: job for job in plan.for_workflow(workflow)}
    todo, seen = list(job_ids), set()
    while todo:
        job_id = todo.pop()
        if job_id not in seen:
            seen.add(job_id)
            todo += list(jobs[job_id].needs)
    return seen
