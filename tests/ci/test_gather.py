"""`--gather-from`: the gathering stages over the results of cells run by separate CI jobs.

Each cell of the ci-gpu profile runs in its own engine run (as one CI job does), its results are
copied the way the workflow uploads them (ci.workflows.gathered_paths), then one gather run reads
those report.json files, runs cross/cross-torch over the outputs beside them and writes one
merged report. The stage work is replaced (instantly 'run' stages that write a file); the reports,
the merge and the gathering are the engine's own."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ci import model as mx
from ci.engine import cache, executors, plan, runner
from ci.engine.executors import Workspace
from ci.engine.plan import Selection
from ci.generate import workflows
from ci.model import cell_slug, key_hash
from ci.report import report
from ci.report.result import Result

PROFILE = "ci-gpu"


@pytest.fixture
def stages_run(monkeypatch):
    """Executors that write `made-by.txt` (the cell) into their output folder; a gathering stage
    records the folders it was given. build-torch fails for arch list 8.6;8.9;12.0."""
    calls: list[tuple[str, str, list[str]]] = []
    monkeypatch.setattr(plan, "host_reason", lambda *a, **k: None)

    def execute(job, ws):
        if job.stage.gather:
            outs = executors.fill(f"{{{job.stage.after[0].replace('-', '_')}_outs}}", job)
            calls.append((job.stage.name, job.cell.id, outs.split(":")))
        if job.stage.name == "build-torch" and job.cell.values["arch_list"] == "8.6;8.9;12.0":
            job.log.parent.mkdir(parents=True, exist_ok=True)
            job.log.write_text("nvcc: error\n")
            return Result("fail", detail="compiler error", log=str(job.log.relative_to(mx.REPO))
                          if job.log.is_relative_to(mx.REPO) else str(job.log))
        job.work.mkdir(parents=True, exist_ok=True)
        (job.work / "made-by.txt").write_text(job.cell.id)
        return Result("pass", outputs={"wheels": [], "out": str(job.work)},
                      artifacts=[str(job.work / "made-by.txt")])

    monkeypatch.setattr(executors, "execute", execute)
    monkeypatch.setattr(cache, "digest", lambda matrix, cell, stage, key, inputs, args=(): key_hash(key))
    return calls


def engine(matrix, host, out: Path, cells) -> runner.Engine:
    stages = matrix.profiles[PROFILE].stages
    selection = Selection(PROFILE, tuple(cells), (), tuple(stages))
    return runner.Engine(matrix, host, selection, Workspace(out, say=lambda text: None),
                         cache.Store(out / "cache"), say=lambda text: None)


def run_ci_jobs(matrix, host, root: Path, skip: tuple[str, ...] = ()) -> Path:
    """One engine run per cell (a CI job each), then its results copied as the job uploads them
    into gathered/results-<cell id>/ (the artifact layout download-artifact leaves)."""
    gathered = root / "gathered"
    cells, _ = mx.expand(matrix, PROFILE)
    for cell in cells:
        slug = cell_slug(cell)
        job_repo = root / "jobs" / slug
        runner.run(engine(matrix, host, job_repo / workflows.MATRIX_OUT, [cell]))
        if slug in skip:
            continue
        artifact = gathered / f"results-{slug}"
        for rel in workflows.gathered_paths(matrix, PROFILE):
            source = job_repo / rel
            target = artifact / Path(rel).relative_to(workflows.MATRIX_OUT)
            if source.is_dir():
                shutil.copytree(source, target)
            elif source.is_file():
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(source, target)
    return gathered


def test_gather_runs_cross_over_every_job_and_merges_one_report(matrix, host, tmp_path, stages_run):
    gathered = run_ci_jobs(matrix, host, tmp_path)
    cross_in_jobs = [c for c in stages_run if c[0] == "cross"]
    assert cross_in_jobs == []          # a job holds one cell: nothing to compare there
    cells, _ = mx.expand(matrix, PROFILE)
    out = tmp_path / "merged"
    data = runner.run_gathered(engine(matrix, host, out, cells), gathered)

    assert [c["id"] for c in data["cells"]] == [c.id for c in cells]
    crosses = [c for c in stages_run if c[0] == "cross"]
    assert len(crosses) == 1             # once per torch x opset group with >= 2 ORT releases
    _, first_cell, outs = crosses[0]
    assert "opset=17" in first_cell
    assert len(outs) == 2                # one align output per ORT release, not one per job
    assert all(Path(o).is_relative_to(gathered) for o in outs)   # the downloaded artifacts
    made_by = [(Path(o) / "made-by.txt").read_text() for o in outs]
    assert sorted(text.split(" ort=")[1].split()[0] for text in made_by) == ["1.17.3", "1.32.0"]

    by_id = {c["id"]: c["stages"] for c in data["cells"]}
    opset17 = [by_id[c.id] for c in cells if c.values["opset"] == "17"]
    assert {s["cross"]["status"] for s in opset17} == {"pass"}
    assert {s["cross"]["origin"] for s in opset17} == {"run", "reused"}
    opset21 = next(by_id[c.id] for c in cells if c.values["opset"] == "21")
    assert opset21["cross"] == {**opset21["cross"], "status": "skip",
                                "reason": "needs align passing for >= 2 ort values of the group"}
    # one torch in ci-gpu: cross-torch has nothing to load another torch's build into
    assert {s["cross-torch"]["status"] for s in by_id.values()} == {"skip"}
    # keys that several jobs ran read as reused from the first, as in one run
    loader = [s["build-loader"]["origin"] for s in by_id.values()]
    assert loader[0] == "run" and set(loader[1:]) == {"reused"}
    assert data["summary"]["fail"] == 3  # build-torch of the three sm86-89-120 cells
    assert (out / "report.md").is_file() and json.loads((out / "report.json").read_text())


def test_a_failure_in_a_job_shows_in_the_merged_report_with_its_log(matrix, host, tmp_path,
                                                                     stages_run):
    gathered = run_ci_jobs(matrix, host, tmp_path)
    cells, _ = mx.expand(matrix, PROFILE)
    data = runner.run_gathered(engine(matrix, host, tmp_path / "merged", cells), gathered)
    failed = [c["stages"]["build-torch"] for c in data["cells"]
              if c["stages"]["build-torch"]["status"] == "fail"]
    assert failed and all(Path(f["log"]).is_relative_to(gathered) for f in failed)
    text = (tmp_path / "merged" / "report.md").read_text()
    assert "## Failures" in text and "nvcc: error" in text     # the log tail, from the artifact
    assert report.exit_code(data) == 1
    aligned = [c["stages"]["align"] for c in data["cells"] if c["stages"]["align"]["origin"] == "run"]
    assert aligned and all(Path(a).is_relative_to(gathered) and Path(a).is_file()
                           for r in aligned for a in r["artifacts"])   # report.md's links work


def test_a_cell_without_results_fails_once_and_names_why(matrix, host, tmp_path, stages_run):
    cells, _ = mx.expand(matrix, PROFILE)
    lost = cell_slug(cells[0])
    gathered = run_ci_jobs(matrix, host, tmp_path, skip=(lost,))
    data = runner.run_gathered(engine(matrix, host, tmp_path / "merged", cells), gathered)
    stages = data["cells"][0]["stages"]
    first = next(iter(stages.values()))
    assert first["status"] == "fail"
    assert first["detail"].startswith("its CI job left no report.json")
    assert {s["reason"] for s in list(stages.values())[1:]} <= {
        "no results from its CI job", "needs align passing for >= 2 ort values of the group",
        "needs abi passing for >= 2 torch values of the group"}


def test_a_cell_left_out_on_purpose_is_skipped_naming_why(matrix, host, tmp_path, stages_run, monkeypatch):
    """The act run leaves cells out (one per toolkit and ORT value) and says which: gathering
    skips those instead of failing on their missing results; any other missing cell still fails."""
    cells, _ = mx.expand(matrix, PROFILE)
    gathered = run_ci_jobs(matrix, host, tmp_path, skip=(cell_slug(cells[0]),))
    monkeypatch.setenv(runner.NOT_RUN_VARIABLE, f"{cell_slug(cells[0])},not-a-cell")  # the workflow's ids
    data = runner.run_gathered(engine(matrix, host, tmp_path / "merged", cells), gathered)
    stages = data["cells"][0]["stages"]
    assert all(s["status"] == "skip" for s in stages.values())
    assert f"its CI job was not run here ({runner.NOT_RUN_VARIABLE})" in {s["reason"] for s in stages.values()}
    others = [s for c in data["cells"][1:] for s in c["stages"].values()]
    assert not any(s.get("detail", "").startswith("its CI job left no report.json") for s in others)


def _write_report(folder: Path, **changes) -> Path:
    folder.mkdir(parents=True)
    data = {"format": report.REPORT_FORMAT, "profile": PROFILE, "report": "build/matrix",
            "cells": [{"id": "c1", "stages": {"build-loader": {"status": "pass", "key": "k"}}}]}
    data.update(changes)
    (folder / "report.json").write_text(json.dumps(data))
    return folder / "report.json"


@pytest.mark.parametrize(("changes", "problem"), [
    ({"format": 1}, "report format 1, expected 2"),
    ({"profile": "host"}, ("a run of profile 'host', expected 'ci-gpu' (the profile given with "
                          "--profile)")),
    ({"cells": [{"id": "c1", "stages": {"build-loader": {"status": "skipped: no GPU"}}}]},
     "cell 'c1', stage build-loader: Result.status: expected one of pass, fail, skip"),
])
def test_an_unmergeable_report_is_named(tmp_path, changes, problem):
    path = _write_report(tmp_path / "results-a", **changes)
    with pytest.raises(report.ReportError) as caught:
        report.read_runs(tmp_path, PROFILE)
    assert str(caught.value).startswith(f"{path}: {problem}")


def test_a_cell_in_two_reports_is_refused(tmp_path):
    first = _write_report(tmp_path / "results-a")
    second = _write_report(tmp_path / "results-b")
    with pytest.raises(report.ReportError) as caught:
        report.read_runs(tmp_path, PROFILE)
    assert str(caught.value) == (f"{second}: cell 'c1' again (also in {first}): one report per "
                                 "cell")


def test_an_empty_download_is_an_error_not_an_empty_report(tmp_path, capsys):
    assert runner.main(["--profile", PROFILE, "--gather-from", str(tmp_path),
                        "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip() == (
        f"--gather-from {tmp_path}: no report.json below it (expected one per CI job's "
        "artifact, e.g. results-<cell>/report.json)")
