"""The GPU bench (bench/run.py --device cuda) where there is no GPU: its plan, its targets, its
report, and its measuring loop driven on the CPU (host clock instead of CUDA events)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

torch = pytest.importorskip("torch", reason="the GPU bench's forms are torch code")

from opforge_bench import gpu, gpu_forms, gpu_ort  # noqa: E402
from opforge_bench import gpu_report as plan  # noqa: E402

import opforge_spec as spec  # noqa: E402

RUN = Path(__file__).resolve().parents[1] / "run.py"


def test_every_op_of_the_spec_has_a_gpu_form_and_a_liger_decision():
    for op in spec.OPS.values():
        form = gpu_forms.FORMS.get(op.torch_name)
        assert form is not None, f"{op.name}: add its form to bench/opforge_bench/gpu_forms.py"
        assert (form.liger is None) == (op.name in plan.no_liger([op.name])), op.name
        assert form.liger == plan.LIGER_KERNELS.get(op.torch_name), op.name


def test_the_targets_shapes_come_first_and_quick_runs_only_them():
    ops = plan.spec_ops()
    full = plan.configs(ops, quick=False)
    firsts = len(plan.TARGET_DTYPES) * sum(len(plan.modes(op)) for op in ops)  # forward only: no gradient
    assert all((t, w) == plan.largest(op) and dtype in plan.TARGET_DTYPES
               for op, dtype, _, t, w in full[:firsts])
    quick = plan.configs(ops, quick=True)
    assert {(op, t, w) for op, _, _, t, w in quick} == {(op, *plan.largest(op)) for op in ops}
    assert plan.largest("SwiGLU") == (16384, 14336) and plan.largest("RMSNorm") == (16384, 8192)


def _row(variant, median_ms, x_copy=1.0, op="RMSNorm", dtype="float32", mode="forward"):
    tokens, width = plan.largest(op)
    return {"layer": "torch", "op": op, "dtype": dtype, "mode": mode, "tokens": tokens,
            "width": width, "variant": variant, "median_ms": median_ms, "x_copy": x_copy,
            "gbps": 3000.0 * x_copy, "copy_gbps": 3000.0}


def test_targets_are_met_missed_or_skipped_with_the_reason():
    rows = [_row(plan.OPFORGE, 1.0, x_copy=0.9), _row(plan.COMPILE, 0.8),
            _row(plan.OPFORGE, 2.0, x_copy=0.6, mode="forward+backward"),
            _row(plan.COMPILE, 2.5, mode="forward+backward")]
    reasons = {f"RMSNorm {plan.LIGER}": "liger_kernel not importable: No module named 'liger_kernel'"}
    found = {t["id"]: t for t in plan.targets(rows, ["RMSNorm"], reasons)}
    assert found["RMSNorm.float32.fwd.copy"]["status"] == "met"
    assert found["RMSNorm.float32.fwd.compile"]["status"] == "missed"
    assert found["RMSNorm.float32.fwd.compile"]["ratio"] == pytest.approx(0.8)
    assert found["RMSNorm.float32.fwdbwd.copy"]["status"] == "missed"  # 0.6 < 0.70
    assert found["RMSNorm.float32.fwdbwd.compile"]["status"] == "met"
    assert found["RMSNorm.float32.fwd.liger"]["status"] == \
        "skipped: liger_kernel not importable: No module named 'liger_kernel'"
    assert found["RMSNorm.bfloat16.fwd.copy"]["status"] == "skipped: not measured"
    assert not any(tid.endswith("liger") for tid, *_ in plan.target_specs(["Swish"]))


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here: the bench measures instead")
def test_device_cuda_without_a_gpu_writes_the_gpu_report_every_part_skipped(tmp_path):
    stage = tmp_path / "result.json"
    proc = subprocess.run([sys.executable, str(RUN), "--device", "cuda", "--out", str(tmp_path / "b")],
                          env={**os.environ, "OPFORGE_STAGE_RESULT": str(stage)},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads((tmp_path / "b" / "bench.json").read_text())
    assert data["skipped"] == "no GPU" and data["rows"] == []
    assert {t["status"] for t in data["targets"]} == {"skipped: no GPU"}
    assert len(data["targets"]) == len(plan.target_specs(plan.spec_ops()))
    assert set(data["peers"].values()) == {"skipped: no GPU"}
    text = (tmp_path / "b" / "bench.md").read_text()
    assert "## Targets (largest shapes)" in text and "skipped: no GPU" in text
    assert json.loads(stage.read_text())["numbers"]["bench.gpu.measured"] == 0


def test_the_measuring_loop_runs_on_the_cpu_and_its_report_is_written(tmp_path):
    n, h = 8, 64
    data = gpu.measure_all(["Swish"], quick=True, timer=gpu.HostTimer(), device="cpu",
                           configs=[("Swish", "float32", "forward", n, h)], log=lambda _: None)
    # Inductor's backward graph takes long to compile on a small CPU: the GPU path has it
    backward = gpu.measure_all(["RMSNorm"], quick=True, timer=gpu.HostTimer(), device="cpu",
                               configs=[("RMSNorm", "bfloat16", "forward+backward", n, h)],
                               variants=(plan.EAGER, plan.OPFORGE), log=lambda _: None)
    data["rows"] += backward["rows"]
    rows = {(r["op"], r["variant"]): r for r in data["rows"]}
    assert {("Swish", plan.COPY), ("Swish", plan.EAGER), ("Swish", plan.COMPILE),
            ("RMSNorm", plan.COPY), ("RMSNorm", plan.EAGER)} <= set(rows)
    assert ("RMSNorm", plan.COMPILE) not in rows
    assert rows[("Swish", plan.EAGER)]["bytes"] == 2 * n * h * 4
    # forward (X, W in; Y out) + backward (dY, X, W in; dX, dW out), bf16
    assert rows[("RMSNorm", plan.EAGER)]["bytes"] == 2 * (n * h + h + n * h) + 2 * (3 * n * h + 2 * h)
    assert rows[("Swish", plan.COMPILE)]["max_rel_diff"] < 1e-6
    assert all(r["runs"] >= gpu.MIN_RUNS and r["min_ms"] <= r["median_ms"] <= r["max_ms"]
               for r in data["rows"])
    assert data["not_measured"]["Swish Liger-Kernel"] == plan.NO_LIGER["swish"]
    if not gpu._import_reason("opforge_torch"):
        assert rows[("RMSNorm", plan.OPFORGE)]["bytes"] == rows[("RMSNorm", plan.EAGER)]["bytes"]
    data.update(device={"name": "cpu", "capability": "0.0", "sms": 0, "l2_bytes": 0,
                        "memory_bytes": 0}, skipped=None, ops=["Swish", "RMSNorm"], quick=True,
                versions={}, flush_below_l2=plan.FLUSH_BELOW_L2,
                targets=plan.targets(data["rows"], ["Swish", "RMSNorm"], data["not_measured"]))
    plan.write(data, tmp_path)
    text = (tmp_path / "bench.md").read_text()
    assert "## Swish, forward: GB/s (% of D2D copy)" in text and plan.COMPILE in text


def test_the_ort_layer_runs_through_iobinding_on_the_cpu_ep():
    pytest.importorskip("onnxruntime")
    data = gpu_ort.measure_all(device="cpu", tokens=4, log=lambda _: None)
    variants = {(r["op"], r["variant"]) for r in data["rows"]}
    assert {("Swish", "ORT QuickGelu (com.microsoft)"), ("RMSNorm", "ORT SimplifiedLayerNormalization"),
            ("SwiGLU", "ORT composed (ORT_ENABLE_ALL)")} <= variants
    assert all(r["max_rel_diff"] < 1e-4 for r in data["rows"]), data["rows"]
    # every op of the spec, each against its composed graph (it timed Swish, RMSNorm and SwiGLU)
    assert {(op, "ORT composed (ORT_ENABLE_ALL)") for op in spec.OPS} <= variants
    import onnxruntime

    has_ep = "CUDAExecutionProvider" in onnxruntime.get_available_providers()
    assert (gpu_ort.unavailable("cuda") == "") == has_ep


def test_the_ort_layer_counts_every_input_and_output_of_the_spec():
    """AddRMSNorm [4, 8]: X, R and W read, Y and H written (the count said `op == "RMSNorm"`)."""
    op = spec.ADD_RMS_NORM
    shapes = gpu_ort._shapes(op, 4, 8)
    assert shapes == {"X": (4, 8), "R": (4, 8), "W": (8,), "Y": (4, 8), "H": (4, 8)}
    assert gpu_ort.moved_bytes(op, shapes) == 4 * (4 * 8 * 4 + 8)
    assert gpu_ort.moved_bytes(spec.SWIGLU, gpu_ort._shapes(spec.SWIGLU, 4, 8)) == \
        4 * (4 * 16 + 4 * 8)
