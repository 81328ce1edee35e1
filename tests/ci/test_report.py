"""report.json / report.md from results: failures first with their log tail, skips with reasons."""
from __future__ import annotations

import json

import pytest

from ci import model as mx
from ci.report import report
from ci.report.result import Result


def make(matrix, tmp_path, host):
    cells, excluded = mx.expand(matrix, "host")
    cells = cells[:3]
    log = tmp_path / "build" / "matrix" / "logs" / "unit-ort" / "abc.log"
    log.parent.mkdir(parents=True)
    log.write_text("collected 10 items\n" + "noise\n" * 40 + "E   AssertionError: Swish y[3] off\n")
    rows = []
    for index in range(len(cells)):
        row = {}
        for name in matrix.stages:
            row[name] = Result.skip("no GPU", key=f"{name}-k")
        row["build-torch"] = Result("pass", 12.5, {"sass.sm_80": 1}, key="bt", detail="SASS sm_80",
                                    origin="run" if index == 0 else "reused", first_cell=0)
        row["unit-ort"] = Result("fail", 3.0, {"tests": 10, "failures": 1}, key=f"uo{index}",
                                 log="build/matrix/logs/unit-ort/abc.log", detail="1 failed",
                                 first_cell=index)
        row["bench"] = Result("pass", 1.0, {}, ["build/bench/swish.png", "build/bench/bench.md"],
                              key="b", first_cell=0,
                              origin="cached")
        rows.append(row)
    return report.write(tmp_path / "build" / "matrix", profile="host", matrix=matrix, host=host,
                        cells=cells, rows=rows, excluded=excluded, duration_s=125.0)


def test_json_has_cells_by_stages(matrix, tmp_path, host):
    data = make(matrix, tmp_path, host)
    saved = json.loads((tmp_path / "build" / "matrix" / "report.json").read_text())
    assert saved["summary"] == data["summary"]
    first = saved["cells"][0]["stages"]
    assert set(first) == set(matrix.stages)
    assert first["unit-ort"]["status"] == "fail" and first["unit-ort"]["numbers"]["failures"] == 1
    assert first["unit-ort"]["reason"] == ""
    assert (first["gpu-unit"]["status"], first["gpu-unit"]["reason"]) == ("skip", "no GPU")
    assert saved["format"] == 2
    assert saved["cells"][1]["stages"]["build-torch"]["origin"] == "reused"
    assert report.exit_code(saved) == 1
    assert saved["summary"]["origin.reused"] == 2 and saved["summary"]["origin.cached"] == 3


def test_markdown_puts_failures_first_with_the_log_tail(matrix, tmp_path, host):
    make(matrix, tmp_path, host)
    text = (tmp_path / "build" / "matrix" / "report.md").read_text()
    assert text.startswith("# opforge matrix: profile `host` — FAILED")
    assert text.index("## Failures") < text.index("## Skipped") < text.index("## Cells")
    assert "E   AssertionError: Swish y[3] off" in text
    assert "| no GPU |" in text
    assert "## Plots" in text and "[build/bench/swish.png](../../build/bench/swish.png)" in text
    assert "[bench.md](../../build/bench/bench.md)" in text
    assert "| 2 | cuda-13.0-system |" in text and "↺" in text and "◆" in text
    assert "## Excluded (by rules or the profile's exclude)" in text and "opset-needs-ort" in text


def test_exit_code_is_zero_only_when_complete_and_nothing_failed(matrix, tmp_path, host):
    data = make(matrix, tmp_path, host)
    data["summary"]["fail"] = 0
    assert report.exit_code(data) == 0
    data["complete"] = False
    assert report.exit_code(data) == 1


def test_markdown_keeps_the_skipped_wording(matrix, tmp_path, host):
    make(matrix, tmp_path, host)
    text = (tmp_path / "build" / "matrix" / "report.md").read_text()
    assert "| skipped |" in text and "| no GPU |" in text
    assert "skipped: skipped" not in text and "| skip |" not in text


@pytest.mark.parametrize("status, reason", [("skipped: no GPU", ""), ("skipped", ""),
                                            ("skip", ""), ("pass", "no GPU"), ("ok", "")])
def test_a_status_holds_no_prose_and_a_reason_goes_with_a_skip_only(status, reason):
    with pytest.raises(ValueError, match=r"Result\.(status|reason): expected"):
        Result(status, reason=reason)


def test_labels_are_what_a_person_reads():
    assert Result.skip("no GPU").label == "skipped: no GPU"
    assert Result("fail").label == "fail"
    assert Result.skip("no GPU").origin == "skip"


def test_tally_sums_distinct_pytest_runs_and_names_unfinished_suites(matrix, tmp_path, host):
    data = make(matrix, tmp_path, host)
    unit_trt = data["cells"][1]["stages"]["unit-trt"]
    unit_trt.update(status="fail", reason="", origin="run", key="ut", numbers={})  # crashed
    tally = report.pytest_tally(data, matrix)
    # unit-ort: one run per cell (3 keys), 10 tests with 1 failure each; bench is not pytest
    assert (tally["passed"], tally["failed"], tally["skipped"]) == (27, 3, 0)
    assert tally["unfinished"] == ["unit-trt (cell 2)"]
    lines = report.summary_lines(data, matrix)
    assert "tests: 27 passed, 3 failed, 0 skipped (4 suites)" in lines
    assert any(line.startswith("FAILED unit-ort (cell 1:") and "log build/matrix/logs/unit-ort/abc.log"
               in line for line in lines)
