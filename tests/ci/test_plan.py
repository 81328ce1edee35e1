"""The pure plan (ci/engine/plan.py): selections by profile, --only (axes, stage, package), --cell and
--skip-slow; the issue-9 fields (profile stages and cpu_builds, cuda required, slow, tests,
tools); the cache digest's stability (ci/engine/cache.py); venvs that skip unchanged installs."""
from __future__ import annotations

import dataclasses

import pytest

from ci import model as mx
from ci.engine import cache, plan
from ci.provision import venvs
from ci.report.result import Result


def test_only_takes_stages_packages_and_axis_values(matrix):
    only = plan.parse_only(["torch=2.13.0", "stage=unit-ort,align", "package=loader"], matrix)
    assert only.axes == {"torch": {"2.13.0"}}
    assert only.stages == {"unit-ort", "align"} and only.packages == {"loader"}


@pytest.mark.parametrize("item, named", [
    ("stage=unit-ortt", "unknown stage 'unit-ortt' (known: build-torch, build-ort,"),
    ("package=nope", "unknown package 'nope' (known: align, loader, ort_plugin, torch_ext, trt_plugin)"),
    ("gpu=yes", "expected AXIS=VALUE[,VALUE] with AXIS stage, package, variant or one of toolkit, torch"),
])
def test_only_errors_name_the_valid_choices(matrix, item, named):
    with pytest.raises(mx.MatrixError, match="--only") as caught:
        plan.parse_only([item], matrix)
    assert named in str(caught.value)


def test_a_stage_selection_brings_the_stages_it_runs_after(matrix):
    chosen = plan.select_stages(matrix, "host", plan.parse_only(["stage=cross"], matrix))
    assert chosen == ("build-torch", "build-ort", "export", "align", "cross")
    by_package = plan.select_stages(matrix, "host", plan.parse_only(["package=loader"], matrix))
    assert by_package == ("build-ort", "build-loader", "unit-loader")


def test_a_stage_outside_the_profile_is_refused_with_its_stages(matrix):
    with pytest.raises(mx.MatrixError, match="stage suite-ci is not run by profile host"):
        plan.select(matrix, "host", only=["stage=suite-ci"])


def test_cell_id_selects_exactly_the_ci_job(matrix):
    cells, _ = mx.expand(matrix, "ci-gpu")
    picked = plan.select(matrix, "ci-gpu", cell_id=plan.cell_slug(cells[2]))
    assert picked.cells == (cells[2],)
    with pytest.raises(mx.MatrixError, match=r"no cell of profile ci-gpu has this id \(known: cuda-13"):
        plan.select(matrix, "ci-gpu", cell_id="cuda-13.0-pypi_torch9")


def test_profile_stages_default_to_all_and_select_the_suite(matrix):
    assert plan.select(matrix, "full").stages == tuple(matrix.profiles["full"].stages)
    suite = plan.select(matrix, "tests")
    assert suite.stages[:5] == ("build-torch", "build-ort", "build-loader", "build-trt", "build-align")
    assert all(matrix.stages[s].kind == "pytest" for s in suite.stages[5:])


def test_cpu_builds_profile_builds_cuda_only_where_required(matrix, host):
    selection = plan.select(matrix, "tests")
    (cell,) = selection.cells
    assert cell.cpu_builds and cell.values["ort"] == "1.17.3"
    assert not mx.builds_cuda(matrix, matrix.stages["build-ort"], cell)
    assert mx.builds_cuda(matrix, matrix.stages["build-trt"], cell)        # cuda: required
    row = plan.plan(matrix, host, selection.cells, stages=selection.stages)[0]
    assert row["build-ort"].key == "stage=build-ort"                        # no toolkit: CPU
    assert "toolkit=cuda-13.0-system" in row["build-trt"].key
    host_cell = mx.expand(matrix, "host")[0][0]
    assert mx.builds_cuda(matrix, matrix.stages["build-ort"], host_cell)


def test_skip_slow_skips_with_the_reason(matrix, host):
    selection = plan.select(matrix, "host", only=["stage=bench", "torch=2.13.0"], skip_slow=True)
    rows = plan.plan(matrix, host, selection.cells, stages=selection.stages, skip_slow=True)
    assert {row["bench"].reason for row in rows} == {"slow stage (--skip-slow)"}
    assert {row["build-torch"].action for row in rows} >= {"run"}


@pytest.mark.parametrize("where, value, message", [
    (("profiles", "tests", "stages"), ["suite-trt"], "suite-trt runs after build-torch: select build-torch too"),
    (("profiles", "tests", "stages"), ["build-nope"], "'build-nope': unknown stage"),
    (("profiles", "tests", "cpu_builds"), "yes", "expected true or false, got 'yes'"),
    (("stages", "suite-ci", "tests"), "../outside", "relative to the repository without '..'"),
    (("stages", "suite-ci", "tools"), ["pyyaml", "left-pad"], "'left-pad': not a key of tools:"),
    (("stages", "bench", "slow"), "very", "expected true or false"),
    (("stages", "build-trt", "cuda"), "sometimes", "expected one of always, never, required, torch"),
])
def test_new_fields_are_validated(mutated, where, value, message):
    *path, last = where
    node = mutated
    for part in path:
        node = node[part]
    node[last] = value
    with pytest.raises(mx.MatrixError, match=".".join(where[:2])) as caught:
        mx.parse(mutated)
    assert message in str(caught.value)


def test_slow_stays_out_of_the_digest_and_the_other_fields_enter_it(matrix):
    cell = mx.expand(matrix, "host")[0][0]
    stage = matrix.stages["build-trt"]
    key = plan.key_text(mx.stage_key(matrix, stage, cell))
    before = cache.digest(matrix, cell, stage, key, {})
    assert "slow" not in cache.stage_fields(stage) and "tools" in cache.stage_fields(stage)
    assert cache.stage_fields(stage)["cuda"] == "always"          # required builds as always did
    assert cache.digest(matrix, cell, dataclasses.replace(stage, slow=True), key, {}) == before
    assert cache.digest(matrix, cell, dataclasses.replace(stage, serial=True), key, {}) != before
    unit = matrix.stages["unit-ort"]
    inputs = {"build-ort": Result("pass", outputs={"wheels": []})}
    assert cache.digest(matrix, cell, unit, "k", inputs) != \
        cache.digest(matrix, cell, dataclasses.replace(unit, tools=("pyyaml",)), "k", inputs)


def test_venv_installs_only_what_changed(tmp_path):
    calls = []
    run = lambda argv: calls.append(argv[argv.index("install") + 1:]) or 0  # noqa: E731
    venv = tmp_path / "venv"
    venv.mkdir()
    items = {"opforge-spec": ("./kernels", "tree-1"), "pyyaml": ("pyyaml==6.0.3", "pyyaml==6.0.3")}
    assert venvs.install_on_top(venv, items, run) == ["opforge-spec", "pyyaml"]
    assert venvs.install_on_top(venv, items, run) == []                 # nothing changed: no pip
    items["opforge-spec"] = ("./kernels", "tree-2")
    assert venvs.install_on_top(venv, items, run, pip_args=["--no-deps"]) == ["opforge-spec"]
    assert calls[-1][-2:] == ["--no-deps", "./kernels"]
    assert len(calls) == 2


def test_a_failed_install_is_not_recorded(tmp_path):
    venv = tmp_path / "venv"
    venv.mkdir()
    with pytest.raises(RuntimeError, match="pip install pyyaml into venv failed"):
        venvs.install_on_top(venv, {"pyyaml": ("pyyaml==6.0.3", "t")}, lambda argv: 1)
    assert venvs.installed(venv) == {}


def test_a_venv_made_at_another_path_is_not_reused(tmp_path):
    """A venv's scripts name the path it was made at: one bind-mounted from a container (/src/...)
    or copied from elsewhere would run nothing of its own, so ensure() makes it anew."""
    import subprocess
    import sys

    made = tmp_path / "made"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(made)], check=True)
    assert venvs.made_here(made)
    moved = tmp_path / "moved"
    made.rename(moved)
    assert not venvs.made_here(moved)
    assert not venvs.made_here(tmp_path / "missing")
