"""Runner behaviour with the stage work replaced: reuse within a run, cache across runs, a failing
stage that skips its dependents and never stops the other cells, the report written per cell."""
from __future__ import annotations

import json

import pytest

from ci import matrix as mx
from ci import runner
from ci.report import Result


@pytest.fixture
def fake(monkeypatch, tmp_path, matrix, host):
    """A runner whose stages 'run' instantly; build-torch fails for torch 2.14.1."""
    calls = []
    seen = {}
    monkeypatch.setattr(runner.hostprobe, "decide", lambda *a, **k: None)

    def execute(self, cell, stage, key, row, digest):
        calls.append((stage.name, key))
        if stage.name == "build-torch" and cell.values["torch"] == "2.14.1":
            return Result("fail", detail="compiler error", log="build/matrix/logs/x.log")
        calls_out = tmp_path / "work" / stage.name / runner.key_hash(key)
        calls_out.mkdir(parents=True, exist_ok=True)
        seen[stage.name] = self.fill("{align_outs}", cell, stage, key, row) \
            if stage.gather else None
        return Result("pass", outputs={"wheels": [], "out": str(calls_out)})

    monkeypatch.setattr(runner.Runner, "execute", execute)
    monkeypatch.setattr(runner.Runner, "digest", lambda self, cell, stage, key, row: runner.key_hash(key))
    cells, excluded = mx.expand(matrix, "host")
    cells = [c for c in cells if c.values["opset"] == "17" and c.values["ort"] != "1.20.1"]

    def run(**kw):
        calls.clear()
        out = tmp_path / "build" / "matrix"
        job = runner.Runner(matrix, host, "host", out=out, say=lambda text: None, **kw)
        return job.run(cells, excluded), list(calls)

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
    job = runner.Runner(matrix, host, "host", out=tmp_path, say=lambda text: None, timeout_s=1)
    log = tmp_path / "log"
    with pytest.raises(TimeoutError, match="ran past the stage timeout"):
        job.sh(["bash", "-c", "sleep 30 & wait"], log)
    assert "timed out after 1 s: killed" in log.read_text()
