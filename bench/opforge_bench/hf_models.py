"""The "Hugging Face models" section of the CPU bench: transformers' own LLaMA and Gemma3 text models
(random weights, nothing downloaded) as HF wrote them and after ``opforge_torch.patch(model)``, in
eager torch and in ONNX Runtime, in tokens per second at two sequence lengths. Every form of one
model and layer is timed round-robin in one run (median after warm-up), so the two sit side by
side under the same machine load."""
from __future__ import annotations

import copy
import os
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # random weights only: never reach the hub

import torch

from . import timing

HF, PATCHED = "HF", "opforge_torch.patch"
BATCH = 1
# tiny but not trivial: a 512-wide model of 4 layers (GQA 8/4 heads of 64), an 8K vocabulary
SHAPE: dict[str, Any] = {"vocab_size": 8192, "hidden_size": 512, "intermediate_size": 1536,
                         "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4,
                         "head_dim": 64, "max_position_embeddings": 2048}
SEQ_LENS = (128, 512)
# --quick (the suite's smoke run): the same code on a 2-layer, 64-wide model
QUICK_SHAPE: dict[str, Any] = {**SHAPE, "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
                               "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                               "head_dim": 16}
QUICK_SEQ_LENS = (16, 64)
# family: (config class, model class, config overrides)
FAMILIES: dict[str, tuple[str, str, dict[str, Any]]] = {"LLaMA": ("LlamaConfig", "LlamaForCausalLM", {}),
            "Gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", {})}
OPSET = 21
# ORT against eager torch, float32 through a whole model: GEMMs of other blockings sum in other orders
CLOSE: dict[str, Any] = {"rtol": 1e-4, "atol": 1e-4}


def missing_requirement() -> str | None:
    """Why the section cannot run here (None: it can)."""
    for module in ("transformers", "onnxruntime", "opforge_ort"):
        try:
            __import__(module)
        except (ImportError, RuntimeError, OSError) as exc:
            return f"{module} does not import: {str(exc).splitlines()[0][:160]}"
    return None


def hf_model(family: str, shape: dict, seed: int = 0):
    """transformers' model of `family` at `shape`, random weights (seeded), eval mode, no KV cache."""
    import transformers

    config_class, model_class, extra = FAMILIES[family]
    config = getattr(transformers, config_class)(**shape, **extra, use_cache=False)
    torch.manual_seed(seed)
    return getattr(transformers, model_class)(config).eval()


def forms(family: str, shape: dict) -> tuple[dict, dict]:
    """{HF: the model, PATCHED: a copy after opforge_torch.patch} and what patch replaced."""
    import opforge_torch

    model = hf_model(family, shape)
    patched = copy.deepcopy(model)
    replaced = opforge_torch.patch(patched)
    return {HF: model, PATCHED: patched}, replaced


class Logits(torch.nn.Module):
    """input_ids -> logits (what is timed and exported: no loss, no cache)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids=input_ids).logits


def token_ids(seq: int, vocab: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, vocab, (BATCH, seq), generator=torch.Generator().manual_seed(seed))


def export(model, path: Path, vocab: int) -> Path:
    """The dynamo export (opforge nodes where patched) with dynamic batch and sequence length."""
    from opforge_torch import onnx as opforge_onnx

    with torch.no_grad():
        opforge_onnx.export(Logits(model).eval(), (token_ids(8, vocab),), str(path), opset_version=OPSET,
                            input_names=["input_ids"], output_names=["logits"],
                            dynamic_shapes={"input_ids": {0: "batch", 1: "seq"}})
    return path


def _check_close(got, want, what: str) -> None:
    got = torch.as_tensor(got)
    scale = want.abs().max().item() or 1.0
    torch.testing.assert_close(got / scale, want / scale, **CLOSE,
                               msg=lambda m: f"Hugging Face models: {what} differs from HF's logits: {m}")


def eager_calls(models: dict, ids: torch.Tensor, want: torch.Tensor, family: str) -> dict:
    calls = {}
    for name, model in models.items():
        with torch.inference_mode():
            _check_close(model(input_ids=ids).logits, want, f"{family} {name} (torch)")
        calls[name] = lambda m=model: m(input_ids=ids)
    return calls


def ort_calls(sessions: dict, ids: torch.Tensor, want: torch.Tensor, family: str) -> dict:
    calls = {}
    feeds = {"input_ids": ids.numpy()}
    for name, session in sessions.items():
        (logits,) = session.run(None, feeds)
        _check_close(logits, want, f"{family} {name} (ORT)")
        calls[name] = lambda s=session: s.run(None, feeds)
    return calls


def _rows(family: str, layer: str, seq: int, timings: dict) -> list:
    base = timings[HF]
    return [{"model": family, "layer": layer, "variant": name, "seq": seq, "batch": BATCH,
             "median_ms": t.median_s * 1e3, "min_ms": t.min_s * 1e3, "runs": t.runs,
             "tokens_per_s": BATCH * seq / t.median_s, "speedup": base.median_s / t.median_s,
             "speedup_of_mins": base.min_s / t.min_s}
            for name, t in timings.items()]


def _opforge_nodes(path: Path) -> int:
    import onnx

    return sum(n.domain == "opforge" for n in onnx.load(str(path)).graph.node)


def measure_family(family: str, *, shape: dict, seq_lens, threads: int, repeat: int,
                   budget_s: float) -> dict:
    """Eager torch and ORT rows of one family, both forms at each sequence length."""
    from .real_models import ort_session

    models, replaced = forms(family, shape)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        paths = {name: export(m, Path(tmp) / f"{name.replace('.', '_')}.onnx", shape["vocab_size"])
                 for name, m in models.items()}
        sessions = {name: ort_session(path, threads) for name, path in paths.items()}
        nodes = {name: _opforge_nodes(path) for name, path in paths.items()}
    for seq in seq_lens:
        ids = token_ids(seq, shape["vocab_size"], seed=seq)
        with torch.inference_mode():
            want = models[HF](input_ids=ids).logits
        for layer, calls in (("torch", eager_calls(models, ids, want, family)),
                             ("ort", ort_calls(sessions, ids, want, family))):
            with torch.inference_mode():
                timings = timing.measure_interleaved(calls, repeat=repeat, budget_s=budget_s)
            rows += _rows(family, layer, seq, timings)
    return {"rows": rows, "replaced": {family: replaced}, "opforge_nodes": {family: nodes}}


def run(families=tuple(FAMILIES), *, quick: bool = False, threads: int, repeat: int,
        budget_s: float) -> dict:
    """Every family's rows, or why the section was not measured."""
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        raise ValueError(f"Hugging Face models: unknown model {', '.join(map(repr, unknown))} "
                         f"(expected some of {', '.join(FAMILIES)})")
    shape, seq_lens = (QUICK_SHAPE, QUICK_SEQ_LENS) if quick else (SHAPE, SEQ_LENS)
    data: dict[str, Any] = {"rows": [], "replaced": {}, "opforge_nodes": {}, "not_measured": {},
                            "threads": threads, "shape": shape, "seq_lens": list(seq_lens),
                            "quick": quick}
    why = missing_requirement()
    if why:
        data["not_measured"] = {family: why for family in families}
        return data
    torch.set_num_threads(threads)
    for family in families:
        result = measure_family(family, shape=shape, seq_lens=seq_lens, threads=threads,
                                repeat=repeat, budget_s=budget_s)
        data["rows"] += result["rows"]
        data["replaced"].update(result["replaced"])
        data["opforge_nodes"].update(result["opforge_nodes"])
    return data


# ---- the report ------------------------------------------------------------------------------
def _row(rows, family, layer, seq, variant):
    return next((r for r in rows if (r["model"], r["layer"], r["seq"], r["variant"]) ==
                 (family, layer, seq, variant)), None)


def side_by_side(data: dict) -> list:
    """One line per family and sequence length: HF and patched tokens/s, eager and ORT."""
    lines = []
    for family in dict.fromkeys(r["model"] for r in data["rows"]):
        for seq in data["seq_lens"]:
            cells = []
            for layer in ("torch", "ort"):
                hf, ours = (_row(data["rows"], family, layer, seq, v) for v in (HF, PATCHED))
                cells += [f"{hf['tokens_per_s']:,.0f}", f"{ours['tokens_per_s']:,.0f}",
                          f"**{ours['speedup']:.2f}x** ({ours['speedup_of_mins']:.2f}x)"]
            lines.append(f"| {family} | {seq} | " + " | ".join(cells) + " |")
    return lines


def _setup(data: dict) -> list:
    """What was measured, how: the lines above the table."""
    shape = data["shape"]
    replaced = "; ".join(f"{f}: {', '.join(f'{k} {v}' for k, v in r.items())}"
                         for f, r in data["replaced"].items())
    nodes = ", ".join(f"{f} {n[HF]} / {n[PATCHED]}" for f, n in data["opforge_nodes"].items())
    quick = " (--quick: a smoke-test size, not a measurement)" if data["quick"] else ""
    return [(f"- transformers' own classes, random weights: hidden {shape['hidden_size']}, "
             f"intermediate {shape['intermediate_size']}, {shape['num_hidden_layers']} layers, "
             f"{shape['num_attention_heads']}/{shape['num_key_value_heads']} heads of "
             f"{shape['head_dim']}, vocabulary {shape['vocab_size']}; batch {BATCH}, float32, "
             f"{data['threads']} thread(s), forward to logits without a cache{quick}"),
            (f"- {HF}: the model as transformers computes it; {PATCHED}: after "
             f"`opforge_torch.patch(model)` (replaced: {replaced})"),
            (f"- ORT: each form's dynamo export (opset {OPSET}, dynamic batch and length; opforge "
             f"nodes HF / patched: {nodes}), ORT_ENABLE_ALL with opforge_ort registered; every "
             "form checked against HF's logits before timing"),
            ("- medians after warm-up, the forms of one model, layer and length timed round-robin; "
             "speedup = HF's median / patched median (ratio of mins in brackets)")]


TABLE_HEAD = [("| model | tokens | torch HF tok/s | torch patched tok/s | torch speedup | ORT HF tok/s "
               "| ORT patched tok/s | ORT speedup |"), "|---|---|---|---|---|---|---|---|"]


def markdown(data: dict) -> str:
    lines = ["", "## Hugging Face models (tokens per second; patched vs HF, >1x is faster)", ""]
    if data["rows"]:
        lines += [*_setup(data), "", *TABLE_HEAD, *side_by_side(data)]
    lines += [f"- not measured: {k}: {v}" for k, v in data["not_measured"].items()]
    return "\n".join(lines) + "\n"


def headline_numbers(data: dict) -> dict:
    return {f"bench.hf.{r['model']}.{r['layer']}.seq{r['seq']}.speedup": round(r["speedup"], 3)
            for r in data["rows"] if r["variant"] == PATCHED}


def write(data: dict, out: Path) -> list:
    """hf_models.json, and the section appended to bench.md."""
    import json

    out.mkdir(parents=True, exist_ok=True)
    (out / "hf_models.json").write_text(json.dumps(data, indent=1))
    with open(out / "bench.md", "a") as md:
        md.write(markdown(data))
    return [str(out / "hf_models.json")]
