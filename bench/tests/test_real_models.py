"""The real-model section on small shapes: the swapped forms compute HF's / torchvision's results,
the exports carry the recommended nodes, and a run writes its table, graphs and plot (no timing
is asserted: benchmarks are not tests)."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
pytest.importorskip("transformers", reason="the LLaMA classes come from transformers")

import onnx
import torch
from opforge_bench import models, real_models

TINY_LLAMA = {"hidden_size": 64, "intermediate_size": 96, "num_attention_heads": 2}


@pytest.fixture
def tiny(monkeypatch):
    for key, value in TINY_LLAMA.items():
        monkeypatch.setitem(models.LLAMA_SHAPE, key, value)
    monkeypatch.setitem(real_models.SHAPES, "tokens", 8)
    monkeypatch.setitem(real_models.SHAPES, "image", (1, 3, 32, 32))


def test_gate_up_and_cat_mlps_compute_hf_llama_mlp(tiny):
    forms = models.llama_mlps()
    x = torch.randn(2, 5, TINY_LLAMA["hidden_size"], generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = forms["HF LlamaMLP"](x)
        for name in ("gate_up Linear + opforge SwiGLU", "cat of two Linears + opforge SwiGLU"):
            # float32, the same GEMMs (64 and 96 wide) and SwiGLU's float32 bars of the spec
            torch.testing.assert_close(forms[name](x), expected, rtol=1e-5, atol=1e-6)
    fused = forms["gate_up Linear + opforge SwiGLU"].gate_up_proj
    assert fused.out_features == 2 * TINY_LLAMA["intermediate_size"]


def test_opforge_decoder_layer_computes_hf_layer(tiny):
    config = models.llama_config()
    forms = models.llama_layers(config)
    cos, sin = models.rotary(config, 6, batch=2)
    x = torch.randn(2, 6, config.hidden_size, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        # float32 (2**-24 a step) through attention, two RMSNorms and the MLP: outputs ~1, the
        # residual stream's error absolute: 1e-5 is ~170 steps at 1, where a relative bar fails near 0
        torch.testing.assert_close(forms["opforge"](x, cos, sin),
                                   forms["HF LlamaDecoderLayer"](x, cos, sin), rtol=1e-5, atol=1e-5)
    layer = forms["opforge"].layer
    assert isinstance(layer.mlp, models.GateUpSwiGLUMLP)
    assert isinstance(layer.input_layernorm, models.OpforgeRMSNorm)


def test_llama_sections_run_and_report(tiny, tmp_path):
    data = real_models.run(["llama_mlp", "llama_layer"], threads=1, repeat=3, budget_s=0.5)
    variants = {(r["model"], r["layer"], r["variant"]) for r in data["rows"]}
    assert ("LLaMA MLP", "ort", "gate_up Linear + opforge SwiGLU") in variants
    assert ("LLaMA decoder layer", "torch", "opforge") in variants
    assert all(r["runs"] >= 3 and r["min_ms"] <= r["median_ms"] for r in data["rows"])
    mlp = data["graphs"]["LLaMA MLP / gate_up Linear + opforge SwiGLU"]
    assert mlp["opforge"] == 1 and mlp["reorder"] == 0
    layer = data["graphs"]['LLaMA decoder layer / opforge, decomposed="auto"']
    assert layer["opforge"] == 3  # SwiGLU and both RMSNorms stay opforge nodes on ORT
    statuses = {t["id"]: t["status"] for t in data["targets"]}
    assert statuses["mlp_ort_gate_up"] in {"met", "missed", "missed: above the ceiling"}
    assert ("LLaMA MLP", "torch", real_models.GEMMS_ALONE) in variants
    ceilings = {t["id"]: t.get("ceiling") for t in data["targets"]}
    assert ceilings["mlp_torch_gate_up"] > 0 and ceilings["mlp_ort_gate_up"] > 1
    assert statuses["efficientnet_ort_auto"] == "not measured"
    (tmp_path / "bench.md").write_text("# opforge benchmarks\n")
    artifacts = real_models.write(data, tmp_path)
    assert "## Real models" in (tmp_path / "bench.md").read_text()
    pytest.importorskip("matplotlib")
    assert (tmp_path / "bench_models.png").stat().st_size > 1000 and len(artifacts) == 2


def test_the_mlp_ceiling_is_what_the_gemms_leave():
    """Eager: HF's time over the GEMMs' alone; ORT: 1 / the GEMMs' share of HF's kernel time. A
    bar above the ceiling is reported as such, not as a plain miss."""
    rows = [{"model": "LLaMA MLP", "layer": layer, "variant": variant, "baseline": base, "ratio": ratio,
             "ratio_of_mins": ratio, "median_ms": 1.0, "min_ms": 1.0, "runs": 5}
            for layer, variant, base, ratio in [
                ("torch", "HF LlamaMLP", "HF LlamaMLP", 1.0),
                ("torch", "gate_up Linear + opforge SwiGLU", "HF LlamaMLP", 1.02),
                ("torch", real_models.GEMMS_ALONE, "HF LlamaMLP", 1.04),
                ("ort", "HF LlamaMLP", "HF LlamaMLP", 1.0),
                ("ort", "gate_up Linear + opforge SwiGLU", "HF LlamaMLP", 1.12)]]
    shares = {"MatMul": 0.8, "Sigmoid": 0.1, "Mul": 0.1}
    data = {"rows": rows, "graphs": {"LLaMA MLP / HF LlamaMLP": {"kernel_share": shares}}}
    targets = {t["id"]: t for t in real_models.targets(data)}
    assert targets["mlp_torch_gate_up"]["ceiling"] == pytest.approx(1.04)
    assert targets["mlp_torch_gate_up"]["status"] == "missed: above the ceiling"
    assert targets["mlp_ort_gate_up"]["ceiling"] == pytest.approx(1.25)
    assert targets["mlp_ort_gate_up"]["status"] == "met"


def test_efficientnet_swaps_every_silu_and_keeps_the_decomposed_graph(tiny):
    pytest.importorskip("torchvision", reason="torchvision does not import beside this torch "
                                              "(the bench profile's torch 2.14.1 has it)")
    data = real_models.run(["efficientnet"], threads=1, repeat=3, budget_s=0.5)
    model = models.efficientnets()["opforge Swish"]
    assert sum(isinstance(m, models.OpforgeSwish) for m in model.modules()) == 49
    graphs = {k.split(" / ")[1]: v for k, v in data["graphs"].items()}
    assert graphs['opforge, decomposed="auto"']["reorder"] == graphs["decomposed export"]["reorder"]
    assert graphs["opforge Swish nodes"]["reorder"] > graphs["decomposed export"]["reorder"]


def test_a_missing_torchvision_is_named(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchvision", None)  # what an import failure looks like
    data = real_models.run(["efficientnet"], threads=1, repeat=3, budget_s=0.5)
    assert data["not_measured"]["efficientnet"].startswith("torchvision does not import")
    assert data["rows"] == []


def test_graph_counts_read_reorders_and_fusions(tmp_path):
    from onnx import helper

    nodes = [helper.make_node("ReorderInput", ["x"], ["a"], domain="com.microsoft.nchwc"),
             helper.make_node("QuickGelu", ["a"], ["b"], domain="com.microsoft"),
             helper.make_node("ReorderOutput", ["b"], ["y"], domain="com.microsoft.nchwc")]
    value = helper.make_tensor_value_info
    graph = helper.make_graph(nodes, "g", [value("x", onnx.TensorProto.FLOAT, [1])],
                              [value("y", onnx.TensorProto.FLOAT, [1])])
    onnx.save(helper.make_model(graph), tmp_path / "g.onnx")
    counts = real_models.graph_counts(tmp_path / "g.onnx")
    assert (counts["nodes"], counts["reorder"], counts["com_microsoft"], counts["opforge"]) == (3, 2, 3, 0)
    assert counts["fused"] == ["com.microsoft::QuickGelu"]
