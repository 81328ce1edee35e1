"""Host probe decisions per cell and stage, and the plan (run / reuse / skip) built on them."""
from __future__ import annotations

import dataclasses

import pytest

from ci import matrix as mx
from ci import probe, runner


@pytest.fixture
def repo(tmp_path):
    """A tree with every package, tests and script present."""
    for package in ("torch_ext", "ort_plugin", "loader", "trt_plugin"):
        (tmp_path / "packages" / package / "tests").mkdir(parents=True)
        (tmp_path / "packages" / package / "pyproject.toml").write_text("")
        (tmp_path / "packages" / package / "tests" / "test_x.py").write_text("")
    for script in ("tests/alignment/export.py", "tests/alignment/compare_versions.py",
                   "packages/align/src/opforge_align/__main__.py", "bench/run.py"):
        (tmp_path / script).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / script).write_text("")
    return tmp_path


def first_cell(matrix, profile="full", **values):
    cells, _ = mx.expand(matrix, profile)
    return next(c for c in cells if all(c.values[k] == v for k, v in values.items()))


def test_gpu_stages_skip_without_a_gpu(matrix, repo, host):
    cell = first_cell(matrix, "host")
    assert probe.decide(matrix, host, matrix.stages["gpu-unit"], cell, repo) == "no GPU"
    assert probe.decide(matrix, host, matrix.stages["trt"], cell, repo) == "no GPU"
    with_gpu = dataclasses.replace(host, gpu=probe.Fact(True, "GPU 0: H100"))
    assert probe.decide(matrix, with_gpu, matrix.stages["gpu-unit"], cell, repo) is None
    assert "TensorRT" in probe.decide(matrix, with_gpu, matrix.stages["trt"], cell, repo)


def test_unavailable_toolkit_skips_cuda_builds_only(matrix, repo, host):
    cuda = first_cell(matrix, torch="2.10.0", toolkit="cuda-12.4-trixie")
    reason = probe.decide(matrix, host, matrix.stages["build-torch"], cuda, repo)
    assert reason == "toolkit cuda-12.4-trixie unavailable here (unavailable: needs apt-get)"
    cpu = first_cell(matrix, torch="2.13.0", toolkit="cuda-12.4-trixie")
    assert probe.decide(matrix, host, matrix.stages["build-torch"], cpu, repo) is None
    assert probe.decide(matrix, host, matrix.stages["build-loader"], cuda, repo) is None


def test_missing_package_or_script_is_a_skip_with_the_path(matrix, repo, host):
    cell = first_cell(matrix, "host")
    (repo / "packages" / "trt_plugin" / "pyproject.toml").unlink()
    (repo / "bench" / "run.py").unlink()
    (repo / "packages" / "loader" / "tests" / "test_x.py").unlink()
    assert probe.decide(matrix, host, matrix.stages["build-trt"], cell, repo) == \
        "packages/trt_plugin not built yet (no pyproject.toml)"
    assert probe.decide(matrix, host, matrix.stages["bench"], cell, repo) == "bench/run.py not present yet"
    assert probe.decide(matrix, host, matrix.stages["unit-loader"], cell, repo) == \
        "packages/loader/tests has no tests yet"


def test_plan_runs_each_key_once_and_reuses_it(matrix, repo, host):
    cells, _ = mx.expand(matrix, "host")
    planned = runner.plan(matrix, host, cells, repo)
    runs = {name: sum(row[name].action == "run" for row in planned) for name in matrix.stages}
    assert runs["build-torch"] == 1 + 4          # CPU torch once; CUDA torch per toolkit x arch list
    assert runs["build-ort"] == 4
    assert runs["build-loader"] == 1
    assert runs["unit-torch"] == 5
    assert runs["gpu-unit"] == 0 and runs["trt"] == 0
    assert all(row["gpu-unit"].reason == "no GPU" for row in planned)
    second = planned[1]["build-torch"]
    assert second.action == "reuse" and second.reason == "cell 1"


def test_plan_skips_dependents_of_a_skipped_stage(matrix, repo, host):
    (repo / "packages" / "torch_ext" / "pyproject.toml").unlink()
    cells, _ = mx.expand(matrix, "host")
    row = runner.plan(matrix, host, cells[:1], repo)[0]
    assert row["unit-torch"].action == "skip"
    assert row["unit-torch"].reason.startswith("needs build-torch (packages/torch_ext not built yet")
