"""The one skip decision per cell and stage (ci/engine/plan.py: what the host probe lacks, a
skipped `after` stage), and the plan (run / reuse / skip) built on it."""
from __future__ import annotations

import dataclasses

from ci import model as mx
from ci.engine import plan
from ci.provision import probe


def first_cell(matrix, profile="full", **values):
    cells, _ = mx.expand(matrix, profile)
    return next(c for c in cells if all(c.values[k] == v for k, v in values.items()))


def test_gpu_stages_skip_without_a_gpu(matrix, host):
    cell = first_cell(matrix, "host")
    assert plan.host_reason(matrix, host, matrix.stages["gpu-unit"], cell) == "no GPU"
    assert plan.host_reason(matrix, host, matrix.stages["trt"], cell) == "no GPU"
    with_gpu = dataclasses.replace(host, gpu=probe.Fact(True, "GPU 0: H100"))
    assert plan.host_reason(matrix, with_gpu, matrix.stages["gpu-unit"], cell) is None
    assert "TensorRT" in plan.host_reason(matrix, with_gpu, matrix.stages["trt"], cell)


def test_unavailable_toolkit_skips_cuda_builds_only(matrix, host):
    cuda = first_cell(matrix, torch="2.10.0", toolkit="cuda-12.4-trixie")
    reason = plan.host_reason(matrix, host, matrix.stages["build-torch"], cuda)
    assert reason == "toolkit cuda-12.4-trixie unavailable here (unavailable: needs apt-get)"
    cpu = first_cell(matrix, torch="2.13.0", toolkit="cuda-12.4-trixie")
    assert plan.host_reason(matrix, host, matrix.stages["build-torch"], cpu) is None
    assert plan.host_reason(matrix, host, matrix.stages["build-loader"], cuda) is None


def test_plan_runs_each_key_once_and_reuses_it(matrix, host):
    cells, _ = mx.expand(matrix, "host")
    planned = plan.plan(matrix, host, cells)
    runs = {name: sum(row[name].action == "run" for row in planned) for name in matrix.stages}
    assert runs["build-torch"] == 1 + 4          # CPU torch once; CUDA torch per toolkit x arch list
    assert runs["build-ort"] == 4
    assert runs["build-loader"] == 1
    assert runs["unit-torch"] == 5
    assert runs["gpu-unit"] == 0 and runs["trt"] == 0
    assert all(row["gpu-unit"].reason == "no GPU" for row in planned)
    second = planned[1]["build-torch"]
    assert second.action == "reuse" and second.reason == "cell 1"


def test_plan_skips_dependents_of_a_skipped_stage(matrix, host):
    cuda = first_cell(matrix, torch="2.10.0", toolkit="cuda-12.4-trixie")
    row = plan.plan(matrix, host, [cuda])[0]
    assert row["build-torch"].action == "skip"
    assert row["unit-torch"].action == "skip"
    assert row["unit-torch"].reason.startswith("needs build-torch (toolkit cuda-12.4-trixie")
