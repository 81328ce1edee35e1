"""The Hugging Face models section (opforge_bench/hf_models.py): bench/run.py --quick measures it at
its smoke-test size and writes it into the report, side by side; the report's table and numbers
are built from the rows (no timing is asserted: benchmarks are not tests)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
pytest.importorskip("transformers", reason="the models are transformers' classes")

from opforge_bench import hf_models

RUN = Path(__file__).resolve().parents[1] / "run.py"


def test_quick_run_writes_the_section_side_by_side(tmp_path):
    stage = tmp_path / "result.json"
    proc = subprocess.run([sys.executable, str(RUN), "--quick", "--out", str(tmp_path), "--sizes", "4096",
                           "--ops", "Swish", "--repeat", "3", "--threads", "1", "--budget", "0.5",
                           "--models", "none", "--hf-models", "LLaMA,Gemma3"],
                          env={**os.environ, "OPFORGE_STAGE_RESULT": str(stage)},
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads((tmp_path / "hf_models.json").read_text())
    assert data["quick"] and data["seq_lens"] == list(hf_models.QUICK_SEQ_LENS)
    measured = {(r["model"], r["layer"], r["variant"], r["seq"]) for r in data["rows"]}
    assert measured == {(m, layer, v, seq) for m in ("LLaMA", "Gemma3") for layer in ("torch", "ort")
                        for v in (hf_models.HF, hf_models.PATCHED) for seq in hf_models.QUICK_SEQ_LENS}
    assert all(r["runs"] >= 3 and r["tokens_per_s"] > 0 for r in data["rows"])
    # the patched export carries one opforge node per replaced module, HF's none
    assert data["opforge_nodes"] == {"LLaMA": {"HF": 0, "opforge_torch.patch": 7},
                                     "Gemma3": {"HF": 0, "opforge_torch.patch": 15}}
    report = (tmp_path / "bench.md").read_text()
    assert "## Hugging Face models" in report and "| Gemma3 | 64 |" in report
    numbers = json.loads(stage.read_text())["numbers"]
    assert numbers["bench.hf.LLaMA.ort.seq16.speedup"] > 0


def _timed(model, layer, variant, seq, median_ms):
    return {"model": model, "layer": layer, "variant": variant, "seq": seq, "batch": 1,
            "median_ms": median_ms, "min_ms": median_ms, "runs": 5,
            "tokens_per_s": seq / (median_ms / 1e3), "speedup": 0.0, "speedup_of_mins": 0.0}


def test_the_table_puts_both_forms_and_layers_of_a_length_on_one_line():
    rows = [_timed("LLaMA", layer, variant, seq, ms)
            for seq in (128, 512) for layer, variant, ms in
            (("torch", "HF", 20.0), ("torch", "opforge_torch.patch", 10.0),
             ("ort", "HF", 8.0), ("ort", "opforge_torch.patch", 10.0))]
    for row in rows:
        base = next(r for r in rows if (r["layer"], r["seq"], r["variant"]) == (row["layer"], row["seq"], "HF"))
        row["speedup"] = row["speedup_of_mins"] = base["median_ms"] / row["median_ms"]
    data = {"rows": rows, "seq_lens": [128, 512], "shape": hf_models.SHAPE, "threads": 2, "quick": False,
            "replaced": {"LLaMA": {"LlamaMLP -> SwiGLU": 4}}, "opforge_nodes": {"LLaMA": {"HF": 0,
                                                                                       "opforge_torch.patch": 13}},
            "not_measured": {}}
    assert hf_models.side_by_side(data)[0] == ("| LLaMA | 128 | 6,400 | 12,800 | **2.00x** (2.00x) | "
                                               "16,000 | 12,800 | **0.80x** (0.80x) |")
    assert hf_models.headline_numbers(data)["bench.hf.LLaMA.ort.seq512.speedup"] == 0.8
    assert "hidden 512" in hf_models.markdown(data)


def test_an_unknown_model_is_named():
    with pytest.raises(ValueError, match="unknown model 'llama' \\(expected some of LLaMA, Gemma3\\)"):
        hf_models.run(["llama"], threads=1, repeat=3, budget_s=0.5)
