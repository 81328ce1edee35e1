"""bench/run.py produces its files (a smoke test: no timing is asserted - benchmarks are not tests)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

RUN = Path(__file__).resolve().parents[1] / "run.py"
pytest.importorskip("torch", reason="the benchmarks need torch")


def test_quick_run_writes_json_table_plots_and_stage_result(tmp_path):
    stage = tmp_path / "result.json"
    env = {**os.environ, "OPFORGE_STAGE_RESULT": str(stage)}
    proc = subprocess.run([sys.executable, str(RUN), "--quick", "--out", str(tmp_path / "b"),
                           "--sizes", "4096,65536", "--repeat", "3", "--threads", "1",
                           "--models", "none", "--hf-models", "none"],
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads((tmp_path / "b" / "bench.json").read_text())
    variants = {(r["op"], r["layer"], r["variant"]) for r in data["rows"]}
    assert {("Swish", "torch", "F.silu"), ("Swish", "torch", "memcpy (torch copy_)")} <= variants
    assert all(r["runs"] >= 3 and r["min_ms"] <= r["median_ms"] <= r["max_ms"] for r in data["rows"])
    assert all(t["status"].split(" (")[0] in {"met", "missed", "not measured"} for t in data["targets"])
    assert "## Targets" in (tmp_path / "b" / "bench.md").read_text()
    pytest.importorskip("matplotlib")
    assert (tmp_path / "b" / "bench_Swish_torch.png").stat().st_size > 1000
    assert "artifacts" in json.loads(stage.read_text())


def test_quick_run_covers_swiglu_and_reports_peak_rss(tmp_path):
    proc = subprocess.run([sys.executable, str(RUN), "--out", str(tmp_path), "--sizes", "65536",
                           "--repeat", "3", "--threads", "1", "--ops", "SwiGLU,Swish",
                           "--models", "none", "--hf-models", "none"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads((tmp_path / "bench.json").read_text())
    assert data["peak_rss_bytes"] > 0 and "peak RSS" in (tmp_path / "bench.md").read_text()
    swiglu = {(r["layer"], r["variant"]) for r in data["rows"] if r["op"] == "SwiGLU"}
    assert ("torch", "torch composed F.silu(a) * b") in swiglu
    ids = {t["id"] for t in data["targets"]}
    assert {"swiglu_torch_vs_composed", "swiglu_ort_vs_composed", "swish_torch_out_vs_copy"} <= ids
