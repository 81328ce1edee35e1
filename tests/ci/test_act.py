"""ci/act (nox -s act): the plan over the workflows generated from the frozen golden matrix, the
report read from act's JSON log (lines as act 0.2.89 writes them), the artifact stand-ins' file
moves, and the job selection. The act run itself is `nox -s act`, not part of the suite."""
from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from ci import model as mx
from ci.act import artifacts, plan, report, run
from ci.generate import workflows

GOLDEN = Path(__file__).resolve().parent / "golden"


@pytest.fixture(scope="module")
def golden_plan(tmp_path_factory) -> plan.Plan:
    folder = tmp_path_factory.mktemp("workflows")
    for path, text in workflows.generated(mx.load(GOLDEN / "matrix.yaml"), "0123456789ab").items():
        if path.startswith(".github/workflows/"):
            (folder / Path(path).name).write_text(text)
    return plan.load(folder, run.WORKFLOWS)


def _job(the_plan: plan.Plan, key: str) -> plan.Job:
    return next(job for job in the_plan.jobs if job.key == key)


def test_every_action_has_a_stand_in_and_every_run_step_runs(golden_plan):
    for job in golden_plan.jobs:
        for step in job.steps:
            assert (step.planned == "replaced") == bool(step.uses), (job.key, step.label)
            if step.uses and not step.uses.startswith("actions/checkout@"):
                assert (plan.STANDINS / step.replacement.standin / "action.yml").is_file()
    assert set(golden_plan.standins().values()) == {
        "upload-artifact", "download-artifact", "attest-build-provenance", "gh-action-pypi-publish"}


def test_an_action_without_a_stand_in_is_refused():
    with pytest.raises(plan.PlanError, match="no offline stand-in"):
        plan.plan_step(0, {"uses": "actions/setup-python@" + "0" * 40})


def test_cells_cover_each_toolkit_and_ort_value_once(golden_plan):
    cell = _job(golden_plan, "matrix.yml:cell")
    include = yaml.safe_load((GOLDEN / "matrix.yml").read_text())[
        "jobs"]["cell"]["strategy"]["matrix"]["include"]
    chosen = [entry for entry in include if entry["id"] in cell.matrix_ids]
    for axis in plan.COVERED_AXES:
        assert {str(e[axis]) for e in chosen} == {str(e[axis]) for e in include}, axis
    assert len(chosen) == 2          # ORT 1.24.4 and 1.31.1 with the one (PyPI) toolkit
    assert sorted(cell.matrix_ids + cell.left_out_ids) == sorted(str(e["id"]) for e in include)


def test_gather_is_told_which_cells_were_left_out(golden_plan, tmp_path):
    cell = _job(golden_plan, "matrix.yml:cell")
    command = run.act_command(run.Stage(out=tmp_path, act="act"), "matrix.yml", None, golden_plan, {},
                              tmp_path / "store")
    assert f"OPFORGE_CELLS_NOT_RUN={','.join(cell.left_out_ids)}" in command


def test_covering_entries_takes_an_entry_only_for_a_new_value():
    entries = [{"toolkit": "a", "ort": "1"}, {"toolkit": "a", "ort": "1"},
               {"toolkit": "b", "ort": "1"}, {"toolkit": "b", "ort": "2"}]
    assert plan.covering_entries(entries) == [entries[0], entries[2], entries[3]]


def test_only_runs_the_job_and_what_it_needs(golden_plan):
    selection = run.select(golden_plan, ["release.yml:smoke"])
    assert selection.runs == [("release.yml", "smoke")]
    assert {key for key in selection.left if key.startswith("release.yml")} == {
        "release.yml:attest", "release.yml:publish"}
    assert "matrix.yml:generated-files" in selection.left
    with pytest.raises(SystemExit, match="expected WORKFLOW"):
        run.select(golden_plan, ["matrix.yml:nope"])


# ------------------------------------------------------------------------------------ report


def _event(job: str, index: int | None = None, **fields) -> str:
    base = {"dryrun": False, "job": f"matrix/{job}", "jobID": job, "level": "info", "matrix": {},
            "time": fields.pop("time", "2026-12-02T10:31:45Z")}
    if index is not None:
        base.update({"stage": fields.pop("stage", "Main"), "stepID": [str(index)]})
    return json.dumps({**base, **fields})


def _log(result: str, failing_output: str) -> list[str]:
    """generated-files as act logs it: checkout (act's copy) then the Check step."""
    return [
        _event("generated-files", msg="⭐ Run Set up job", step="Set up job",
               time="2026-12-02T10:31:40Z"),
        _event("generated-files", 0, msg="  ✅  Success - Main actions/checkout@x",
               stepResult="success", executionTime=227_900_304),
        _event("generated-files", 1, msg=failing_output + "\n", raw_output=True),
        _event("generated-files", 1, msg="  result - Main Check", stepResult=result,
               executionTime=37_245_424_195),
        *([_event("generated-files", 1, msg="exit status 127", level="error")]
          if result == "failure" else []),
        _event("generated-files", msg="🏁  Job", jobResult=result, time="2026-12-02T10:32:25Z"),
    ]


def _rows(golden_plan, lines):
    runs = {"matrix.yml": report.read_events(lines)}
    selection = run.select(golden_plan, ["matrix.yml:generated-files"])
    return report.rows_for(golden_plan, runs, selection.left), runs


def test_a_passing_job_reports_ran_and_replaced_steps_with_times(golden_plan):
    rows, _ = _rows(golden_plan, _log("success", "opforge: up to date"))
    mine = [row for row in rows if row.job == "generated-files"]
    assert [(row.step, row.status) for row in mine] == [
        ("", "ran"), ("actions/checkout@8e8c483db84b4bee98b60c0593521ed34d9990e8", "replaced"),
        ("Check", "ran")]
    assert mine[0].seconds == 45.0 and mine[2].seconds == pytest.approx(37.245, abs=1e-3)
    assert "act copies the working tree" in mine[1].why
    assert not report.failures(rows)
    left = [row for row in rows if row.job == "suite"]
    assert left == [report.Row("matrix.yml", "suite", "", "left",
                               "not selected (--only matrix.yml:generated-files)", 0.0)]


def test_a_failed_step_is_named_with_its_job_and_output(golden_plan):
    rows, runs = _rows(golden_plan, _log("failure", "\x1b[31mline 2: opforge_podmn: command not "
                                                    "found\x1b[0m"))
    job_row, failed = report.failures(rows)             # the job, then its step
    assert (job_row.job, job_row.step) == ("generated-files", "")
    assert (failed.workflow, failed.job, failed.step, failed.why) == (
        "matrix.yml", "generated-files", "Check", "exit status 127")
    lines = report.failure_lines(rows, runs)
    assert lines[0] == ("opforge act: FAILED matrix.yml job generated-files, step 'Check': "
                        "exit status 127")
    assert lines[1] == "    line 2: opforge_podmn: command not found"    # without colour codes
    assert len(lines) == 2                                # the job's line is its step's
    assert "**FAILED**" in report.markdown(rows, 45.0)
    assert json.loads(report.as_json(rows, 45.0))["passed"] is False


def test_a_step_without_events_in_a_passing_job_was_skipped_by_its_if(golden_plan):
    lines = [line for line in _log("success", "ok") if '"stepID": ["1"]' not in line]
    rows, _ = _rows(golden_plan, lines)
    check = next(row for row in rows if row.step == "Check")
    assert (check.status, check.why) == ("skipped", "its if: was false")


def test_matrix_jobs_are_told_apart_by_their_id(golden_plan):
    cell = _job(golden_plan, "matrix.yml:cell")
    first, second = cell.matrix_ids
    line = json.dumps({"jobID": "cell", "matrix": {"id": first}, "jobResult": "success",
                       "time": "2026-12-02T10:31:45Z"})
    runs = report.read_events([line])
    assert set(runs) == {("cell", first)}
    rows = report.job_rows(cell, runs.get(("cell", second)), second, "act did not run it")
    assert rows == [report.Row("matrix.yml", f"cell[{second}]", "", "left", "act did not run it",
                               0.0)]


# --------------------------------------------------------------------------------- artifacts


def test_upload_keeps_paths_below_the_common_root_and_download_restores_them(tmp_path):
    work, store = tmp_path / "work", tmp_path / "store"
    (work / "build/matrix/logs/a").mkdir(parents=True)
    (work / "build/matrix/report.json").write_text("{}")
    (work / "build/matrix/logs/a/x.log").write_text("x")
    (work / "build/matrix/logs/a/y.tmp").write_text("y")
    paths = "build/matrix/report.json\nbuild/matrix/logs/\n!build/matrix/logs/**/*.tmp\n"
    assert artifacts.upload("results-1", paths, "error", work, store) == 0
    assert sorted(str(p.relative_to(store)) for p in store.rglob("*") if p.is_file()) == [
        "results-1/logs/a/x.log", "results-1/report.json"]
    assert artifacts.upload("results-1", paths, "error", work, store) == 1   # names are unique
    assert artifacts.upload("results-2", "build/matrix/logs/a/x.log", "error", work, store) == 0
    assert artifacts.download("", "results-*", tmp_path / "gathered", store) == 0
    assert (tmp_path / "gathered/results-1/logs/a/x.log").read_text() == "x"
    assert (tmp_path / "gathered/results-2/x.log").read_text() == "x"
    assert artifacts.download("results-1", "", tmp_path / "one", store) == 0
    assert (tmp_path / "one/report.json").is_file()


def test_missing_files_and_artifacts_fail_where_the_action_would(tmp_path, capsys):
    assert artifacts.upload("dist", "build/release/dist/", "error", tmp_path, tmp_path / "s") == 1
    assert artifacts.upload("dist", "build/release/dist/", "warn", tmp_path, tmp_path / "s") == 0
    assert "::warning::" in capsys.readouterr().out
    assert artifacts.download("pypi", "", tmp_path / "d", tmp_path / "s") == 1
    assert artifacts.attest("dist/*", tmp_path) == 1
    (tmp_path / "dist").mkdir()
    (tmp_path / "dist/a.whl").write_text("")
    assert artifacts.attest("dist/*", tmp_path) == 0
    assert "skipped: build provenance needs GitHub's OIDC" in capsys.readouterr().out


def test_the_containers_get_what_this_machines_pip_configuration_names(tmp_path):
    wheels, index = tmp_path / "wheels", tmp_path / "pypi" / "simple"
    wheels.mkdir()
    index.mkdir(parents=True)
    config = tmp_path / "pip.conf"
    config.write_text(f"[global]\nfind-links = {wheels}\nextra-index-url = file://{index} "
                      f"file://{tmp_path}/gone/simple\n")
    found = run.pip_paths([config], {"PIP_CERT": str(config), "HOME": str(tmp_path)})
    assert found == sorted([config, tmp_path / "pypi", wheels])   # an index: its root, files too


def test_a_step_with_an_id_is_matched_by_it(golden_plan):
    image = _job(golden_plan, "matrix.yml:image")
    assert [step.step_id for step in image.steps] == ["0", "ref", "2"]
    lines = [_event("image", 0, msg="ok", stepResult="success", executionTime=1),
             json.dumps({"jobID": "image", "matrix": {}, "stepID": ["ref"], "stage": "Main",
                         "stepResult": "success", "executionTime": 2_000_000_000,
                         "time": "2026-12-02T10:31:46Z"}),
             _event("image", 2, msg="boom", stepResult="failure", executionTime=1),
             _event("image", msg="🏁", jobResult="failure", time="2026-12-02T10:31:47Z")]
    rows = report.job_rows(image, report.read_events(lines)[("image", "")], "", "")
    assert [(row.step, row.status) for row in rows][2:] == [
        ("Image name", "ran"), ("Build and push (unless the registry has this tag)", "failed")]
    assert rows[2].seconds == 2.0


def test_every_cell_gets_the_longer_stage_timeout_of_one_machine(golden_plan, tmp_path):
    """act builds a workflow's cells side by side here: the cells' stage commands get
    CELL_STAGE_TIMEOUT_S (the matrix engine reads it from OPFORGE_STAGE_TIMEOUT_S)."""
    command = run.act_command(run.Stage(out=tmp_path, act="act"), "matrix.yml", None, golden_plan, {},
                              tmp_path / "store")
    assert f"OPFORGE_STAGE_TIMEOUT_S={run.CELL_STAGE_TIMEOUT_S}" in command
    assert command[command.index(f"OPFORGE_STAGE_TIMEOUT_S={run.CELL_STAGE_TIMEOUT_S}") - 1] == "--env"


def test_every_job_in_the_image_gets_the_act_runs_container_options(golden_plan, tmp_path):
    """act 0.2.89 ignores --container-options for a job with a `container:` block (nektos/act
    PR #6111): each such job reads its options from a variable the act command sets (the release
    build job went without this machine's pip configuration and CA bundle)."""
    command = run.act_command(run.Stage(out=tmp_path, act="act"), "release.yml", None, golden_plan, {},
                              tmp_path / "store")
    given = {arg.split("=", 1)[0] for arg, flag in zip(command[1:], command) if flag == "--var"}
    for name in ("matrix.yml", "release.yml", "wheels.yml"):
        for job_id, job in yaml.safe_load((GOLDEN / name).read_text())["jobs"].items():
            if "container" not in job:
                continue
            variables = set(re.findall(r"vars\.(\w+)", str(job["container"].get("options", ""))))
            assert variables & given, f"{name}:{job_id}: its container options come from no variable the act run sets"


def test_a_service_undoes_its_work_before_it_stops():
    """The podman service removes the job containers act leaves (a failed job's keep running and
    hold mounts) while its socket still answers, then ends."""
    import subprocess

    from ci.act import services

    order = []
    process = subprocess.Popen(["sleep", "60"], start_new_session=True)
    service = services.Service("sleeper", process, Path("log"), "",
                               before_stop=lambda: order.append(process.poll() is None))
    service.stop()
    assert order == [True] and process.poll() is not None


@pytest.fixture
def served_index(tmp_path):
    """A PEP 503 index (ci/artifacts/index.py) of a folder, over HTTP on 127.0.0.1."""
    import functools
    import http.server
    import io
    import tarfile
    import threading
    import zipfile

    from ci.artifacts import index

    uploaded = tmp_path / "pypi"
    uploaded.mkdir()
    # a local version's "+" is URL-quoted in the index's links (%2B): the check names the file unquoted
    for name in ("demo_wheel-1.0-py3-none-any.whl", "demo_local-1.0+cu128-py3-none-any.whl"):
        with zipfile.ZipFile(uploaded / name, "w") as wheel:
            wheel.writestr(f"{name.split('-')[0]}-1.0.dist-info/METADATA",
                           f"Metadata-Version: 2.1\nName: {name.split('-')[0]}\n")
    with tarfile.open(uploaded / "demo_trt-1.0.tar.gz", "w:gz") as sdist:
        sdist.addfile(tarfile.TarInfo("demo_trt-1.0/README"), io.BytesIO(b""))
    root = tmp_path / "index"
    index.write_index(sorted(uploaded.iterdir()), root)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", uploaded
    server.shutdown()


def test_the_published_files_are_compared_byte_for_byte_with_the_upload(served_index):
    """The act command's check after publish: every uploaded file served, fetched and hashed;
    an sdist-only project (opforge-trt, a CUDA build) is not built (the old check pip-installed
    every project and failed building opforge-trt's sdist without CUDA)."""
    from ci.act import published

    index, uploaded = served_index
    assert published.differences(published.uploaded_files(uploaded), published.served_files(index)) == []
    served = hashlib.sha256((uploaded / "demo_trt-1.0.tar.gz").read_bytes()).hexdigest()
    (uploaded / "demo_trt-1.0.tar.gz").write_bytes(b"changed")
    (uploaded / "demo_extra-1.0.tar.gz").write_bytes(b"")
    changed = hashlib.sha256(b"changed").hexdigest()
    assert published.differences(published.uploaded_files(uploaded), published.served_files(index)) == [
        "demo_extra-1.0.tar.gz: uploaded, not served",
        f"demo_trt-1.0.tar.gz: served with sha256 {served[:12]}…, uploaded {changed[:12]}…"]
    assert published.project("opforge_trt-0.1.0.tar.gz") == "opforge-trt"
    assert published.project("opforge_ort-0.1.0-py3-none-manylinux_2_24_x86_64.whl") == "opforge-ort"
