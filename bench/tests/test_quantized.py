"""An op whose outputs have their own dtype and shape in the bench (RMSNormQuant: X, W -> Q int8
[rows, cols], Scale float32 [rows, 1]): the preallocated outputs follow the spec, a tiny run times
the fused op beside its composed form (rms_norm, amax, divide, round, clamp, cast) in torch and
ORT, and the GPU plan times it forward only (no gradient) against a D2D copy of its bytes."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import opforge_spec

RUN = Path(__file__).resolve().parents[1] / "run.py"
torch = pytest.importorskip("torch", reason="the benchmarks need torch")
OP = opforge_spec.OPS.get("RMSNormQuant")
pytestmark = pytest.mark.skipif(OP is None, reason="the spec has no RMSNormQuant")


def test_outputs_are_preallocated_in_their_own_dtype_and_shape():
    from opforge_bench import torch_variants as tv

    inp = tv.inputs("RMSNormQuant", 3 * tv.COLS)
    assert (inp["q"].dtype, tuple(inp["q"].shape)) == (torch.int8, (3, tv.COLS))
    assert (inp["scale"].dtype, tuple(inp["scale"].shape)) == (torch.float32, (3, 1))
    assert tv._out_arguments(OP, inp) == {"q_out": inp["q"], "scale_out": inp["scale"]}


def test_a_tiny_run_times_the_fused_op_against_its_composed_form(tmp_path):
    proc = subprocess.run([sys.executable, str(RUN), "--out", str(tmp_path), "--sizes", "65536",
                           "--repeat", "3", "--threads", "1", "--ops", "RMSNormQuant",
                           "--models", "none", "--hf-models", "none", "--budget", "2"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads((tmp_path / "bench.json").read_text())
    variants = {(r["layer"], r["variant"]) for r in data["rows"] if r["op"] == "RMSNormQuant"}
    assert {("torch", "torch composed"), ("torch", "opforge_torch"), ("torch", "opforge_torch out="),
            ("ort", "composed (ORT_ENABLE_ALL)"), ("ort", "opforge_ort")} <= variants, data["not_measured"]
    assert data["ort_graphs"]["RMSNormQuant opforge_ort"] == ["opforge::RMSNormQuant"]
    composed = data["ort_graphs"]["RMSNormQuant composed, no fusion (ORT_DISABLE_ALL)"]
    assert {"ReduceMean", "Round", "Clip", "Cast"} <= set(composed), composed


def test_the_gpu_plan_times_an_inference_op_forward_only():
    from opforge_bench import gpu_report as plan

    assert {mode for op, _, mode, _, _ in plan.configs(["RMSNormQuant"], quick=True)} == {"forward"}
    assert {mode for _, _, _, _, mode, _, _ in plan.target_specs(["RMSNormQuant"])} == {"forward"}
    kinds = {kind for *_, kind, _ in plan.target_specs(["RMSNormQuant"])}
    assert "copy" in kinds  # judged against a D2D copy of the same bytes
    assert {mode for op, _, mode, _, _ in plan.configs(["RMSNorm"], quick=True)} == set(plan.MODES)
