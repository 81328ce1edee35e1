"""The engine with the stage work replaced: reuse within a run, cache across runs, a failing
stage that skips its dependents and never stops the other cells, the report written per cell."""
from __future__ import annotations

import dataclasses
import json
import shutil
import sys
import threading
import time
from pathlib import Path

import pytest

from ci import model as mx
from ci.engine import cache, executors, plan, runner
from ci.engine.executors import Workspace
from ci.engine.plan import Selection
from ci.model import key_hash
from ci.report.result import Result


@pytest.fixture
def fake(monkeypatch, tmp_path, matrix, host):
    """The engine with executors that 'run' instantly; build-torch fails for torch 2.14.1."""
    calls = []
    seen = {}
    active, lock = [], threading.Lock()
    monkeypatch.setattr(plan, "host_reason", lambda *a, **k: None)

    def execute(job, ws):
        calls.append((job.stage.name, job.key))
        with lock:
            active.append(job.stage.name)
            seen["most at once"] = max(seen.get("most at once", 0), len(active))
        time.sleep(0.01)
        with lock:
            active.remove(job.stage.name)
        if job.stage.name == "build-torch" and job.cell.values["torch"] == "2.14.1":
            return Result("fail", detail="compiler error", log="build/matrix/logs/x.log")
        job.work.mkdir(parents=True, exist_ok=True)
        seen[job.stage.name] = executors.fill("{align_outs}", job) if job.stage.gather else None
        return Result("pass", outputs={"wheels": [], "out": str(job.work)})

    monkeypatch.setattr(executors, "execute", execute)

    def venv(ws, matrix, cell, kind, log):   # runner.make_venvs: recorded, nothing installed
        with lock:
            seen.setdefault("venvs", []).append(f"{kind}-{cell.values[kind]}")
        return ws.venv_path(matrix, cell, kind)

    monkeypatch.setattr(executors.Workspace, "venv", venv)
    monkeypatch.setattr(cache, "digest", lambda matrix, cell, stage, key, inputs, args=(): key_hash(key))
    cells, excluded = mx.expand(matrix, "host")
    cells = [c for c in cells if c.values["opset"] == "17" and c.values["ort"] != "1.20.1"]

    def run(fresh=False, stages=None, skip_slow=False, jobs=1, out="matrix"):
        calls.clear()
        out = tmp_path / "build" / out
        selection = Selection("host", tuple(cells), tuple(excluded),
                              tuple(stages or matrix.profiles["host"].stages), skip_slow)
        engine = runner.Engine(matrix, host, selection, Workspace(out, say=lambda text: None),
                               cache.Store(out / "cache", fresh=fresh), say=lambda text: None,
                               jobs=jobs)
        return runner.run(engine), list(calls)

    run.seen = seen
    return run


def test_each_key_runs_once_and_failures_skip_dependents(fake, matrix):
    data, calls = fake()
    assert len(calls) == len(set(calls))                     # nothing ran twice
    by_torch = {c["values"]["torch"]: c for c in data["cells"]}
    cuda = by_torch["2.14.1"]["stages"]
    assert cuda["build-torch"]["status"] == "fail"
    assert cuda["unit-torch"]["status"] == "skip"
    assert cuda["unit-torch"]["reason"] == "needs build-torch (failed)"
    assert cuda["unit-ort"]["status"] == "pass"               # other stages of the cell go on
    assert by_torch["2.13.0"]["stages"]["unit-torch"]["status"] == "pass"
    assert data["summary"]["fail"] > 0 and runner.report.exit_code(data) == 1
    reused = [s for c in data["cells"] for s in c["stages"].values() if s["origin"] == "reused"]
    assert reused and all(s["first_cell"] is not None for s in reused)


def outcomes(data) -> list:
    return [(i, name, s["status"], s["reason"], s["origin"], s["first_cell"])
            for i, c in enumerate(data["cells"]) for name, s in sorted(c["stages"].items())]


def test_side_by_side_runs_give_the_serial_report(fake):
    serial, serial_calls = fake(out="serial")
    side, side_calls = fake(jobs=2, out="side")
    assert outcomes(side) == outcomes(serial)
    assert sorted(side_calls) == sorted(serial_calls)        # each key once, the failed one too
    assert fake.seen["most at once"] == 2


def test_second_run_takes_passes_from_the_cache(fake):
    fake()
    data, calls = fake()
    ran = {name for name, _ in calls}
    assert ran == {"build-torch"}                    # only the failed build is tried again
    origins = {s["origin"] for c in data["cells"] for s in c["stages"].values()
               if s["status"] == "pass"}
    assert "cached" in origins


def test_fresh_reruns_tests_but_keeps_builds(fake):
    fake()
    _, calls = fake(fresh=True)
    ran = {name for name, _ in calls}
    assert "unit-ort" in ran and "build-ort" not in ran


def test_report_is_written_after_every_cell(fake, tmp_path):
    data, _ = fake()
    saved = json.loads((tmp_path / "build" / "matrix" / "report.json").read_text())
    assert saved["complete"] and len(saved["cells"]) == len(data["cells"])


def test_cross_runs_once_per_export_over_every_ort(fake):
    data, calls = fake()
    cross = [key for name, key in calls if name == "cross"]
    assert cross == ["opset=17 stage=cross torch=2.13.0"]   # 2.14.1's build failed: no export
    assert len(fake.seen["cross"].split(":")) == 2          # ORT 1.17.3 and 1.32.0 of the group
    by_torch = {}
    for c in data["cells"]:
        cross_result = c["stages"]["cross"]
        by_torch.setdefault(c["values"]["torch"], set()).add((cross_result["status"],
                                                               cross_result["reason"]))
    assert by_torch["2.13.0"] == {("pass", "")}
    assert by_torch["2.14.1"] == {("skip", "needs align passing for >= 2 ort values of the group")}


def test_a_hung_command_is_killed_and_fails_the_stage(matrix, host, tmp_path):
    ws = Workspace(tmp_path, say=lambda text: None, timeout_s=1)
    log = tmp_path / "log"
    with pytest.raises(TimeoutError, match="ran past the stage timeout"):
        ws.sh(["bash", "-c", "sleep 30 & wait"], log)
    assert "timed out after 1 s: killed" in log.read_text()


def test_a_command_s_cpu_time_counts_its_children_and_not_its_sleep(tmp_path):
    ws = Workspace(tmp_path, say=lambda text: None)
    burn, sleep = tmp_path / "burn.log", tmp_path / "sleep.log"
    spin = "import time; t = time.process_time(); exec('while time.process_time() - t < 0.6: pass')"
    assert ws.sh(["bash", "-c", f'{sys.executable} -c "{spin}"; exit 3'], burn) == 3
    assert ws.sh(["sleep", "0.5"], sleep) == 0
    assert 0.5 <= ws.cpu_seconds(burn) < 5
    assert ws.cpu_seconds(sleep) < 0.2
    assert ws.cpu_seconds(burn) == 0.0  # read once: a log's time belongs to one stage result


def test_unselected_stages_are_absent_and_slow_ones_skip_with_the_reason(fake):
    data, calls = fake(stages=["build-torch", "build-ort", "bench"], skip_slow=True)
    assert {name for name, _ in calls} == {"build-torch", "build-ort"}
    assert data["stages"] == ["build-torch", "build-ort", "bench"]
    bench = {c["stages"]["bench"]["reason"] for c in data["cells"]}
    assert bench == {"slow stage (--skip-slow)"}
    assert all(set(c["stages"]) == {"build-torch", "build-ort", "bench"} for c in data["cells"])


def test_a_broken_executor_fails_its_stage_with_the_error_in_the_log(fake, monkeypatch, tmp_path):
    def boom(job, ws):
        raise RuntimeError("pip install ./kernels failed")

    monkeypatch.setattr(executors, "execute", boom)
    data, _ = fake(stages=["build-loader"])
    result = data["cells"][0]["stages"]["build-loader"]
    assert (result["status"], result["detail"]) == ("fail", "RuntimeError: pip install ./kernels failed")
    assert "pip install ./kernels failed" in open(result["log"]).read()  # out is outside the repo


def test_a_tool_run_by_a_suites_tests_reports_nothing_into_the_suites_result(
        tmp_path, monkeypatch, matrix):
    """opforge-align, run by its own tests, writes a stage result where $OPFORGE_STAGE_RESULT
    points: a pytest stage's numbers stay its JUnit counts."""
    suite = mx.REPO / "build" / "test-runner" / tmp_path.name  # stage folders are the repo's
    shutil.rmtree(suite, ignore_errors=True)
    suite.mkdir(parents=True)
    (suite / "test_tool.py").write_text(
        "import json, os\n\n\n"
        "def test_runs_a_tool_that_reports():\n"
        "    with open(os.environ['OPFORGE_STAGE_RESULT'], 'w') as result:\n"
        "        json.dump({'numbers': {'align.failed': 1}}, result)\n")
    stage = dataclasses.replace(matrix.stages["unit-loader"], tests=str(suite.relative_to(mx.REPO)), after=(),
                                serial=True, tools=())
    cell = mx.expand(matrix, "host")[0][0]
    job = executors.Job(matrix, cell, stage, key="k", digest="d", inputs={},
                        log=tmp_path / "stage.log", work=tmp_path / "work")
    monkeypatch.setattr(executors, "prepared_venv", lambda job, ws, extra_tools=(): Path(sys.prefix))
    try:
        result = executors.pytest(job, Workspace(tmp_path / "out", say=lambda text: None))
    finally:
        shutil.rmtree(suite)
    assert result.status == "pass", (tmp_path / "stage.log").read_text()
    assert result.numbers["tests"] == 1 and "align.failed" not in result.numbers, result.numbers


def test_side_by_side_builds_go_first_and_a_gathering_stage_starts_once_its_group_is_done(fake):
    _, calls = fake(jobs=2, out="side")
    names = [name for name, _ in calls]
    builds = [i for i, name in enumerate(names) if name.startswith("build-")]
    assert builds == list(range(len(builds)))                # every build before any test
    cross = names.index("cross")
    assert any(not name.startswith(("cross", "build-")) for name in names[cross + 1:]), names


def test_side_by_side_the_venvs_are_made_on_a_thread_of_their_own_once_each(fake, matrix):
    fake.seen.pop("venvs", None)
    fake(jobs=2, out="side")
    made = fake.seen["venvs"]
    assert len(made) == len(set(made))                       # each venv once
    torch = [v for v in made if v.startswith("torch-")]
    assert torch and made[:len(torch)] == torch              # the builds' torch venvs first
    assert {v for v in made if v.startswith("ort-")} == {"ort-1.17.3", "ort-1.32.0"}
    fake.seen.pop("venvs")
    fake(jobs=1, out="serial")
    assert "venvs" not in fake.seen                          # one slot: each stage makes its own


def test_a_machine_sets_its_own_stage_timeout(monkeypatch):
    monkeypatch.delenv(runner.TIMEOUT_VARIABLE, raising=False)
    assert runner.stage_timeout_default() == executors.STAGE_TIMEOUT_S
    monkeypatch.setenv(runner.TIMEOUT_VARIABLE, "3600")
    assert runner.stage_timeout_default() == 3600
    for bad in ("0", "-5", "1h"):
        monkeypatch.setenv(runner.TIMEOUT_VARIABLE, bad)
        with pytest.raises(SystemExit, match=runner.TIMEOUT_VARIABLE):
            runner.stage_timeout_default()
