"""The real-model section of the CPU bench: EfficientNet-B0, the LLaMA-style MLP and decoder layer,
each in the model's own form against opforge ops swapped in, in eager torch and in ONNX Runtime
(ORT_ENABLE_ALL, the optimized graph read back: Reorder nodes of the NCHWc layout pass and
com.microsoft ops). Ratios = baseline median / variant median, variants timed round-robin."""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import torch

from . import models, timing

# input shapes, read at each call (the suite's tests shrink them); with models.LLAMA_SHAPE
SHAPES: dict[str, Any] = {"image": (1, 3, 224, 224), "tokens": 512}
MLP_TARGET = 1.1  # the LLaMA-style MLP's bar against HF's composed form (eager and ORT)
GEMMS_ALONE = "GEMMs alone (the ceiling)"
GEMM_OPS = ("MatMul", "Gemm", "FusedMatMul", "MatMulNBits")


def ort_session(path: Path, threads: int, optimized: Path | None = None):
    import onnxruntime as ort

    import opforge_ort

    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    # sessions timed round-robin: a spinning pool of one would steal the cores of the next
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.register_custom_ops_library(opforge_ort.library_path())
    if optimized is not None:
        options.optimized_model_filepath = str(optimized)
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def kernel_shares(path: Path, args, threads: int, runs: int = 20) -> dict:
    """Per op type, its share of the kernel time of a session (ORT's profiler, medians per node):
    how much of a model a fused activation can save at most."""
    import json

    import onnxruntime as ort

    import opforge_ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.enable_profiling = True
    options.profile_file_prefix = str(path.with_suffix(""))
    options.register_custom_ops_library(opforge_ort.library_path())
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    feeds = _feeds(session, args)
    for _ in range(runs):
        session.run(None, feeds)
    per_node: dict = {}
    for event in json.loads(Path(session.end_profiling()).read_text()):
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            per_node.setdefault((event["name"], event["args"]["op_name"]), []).append(event["dur"])
    by_op: dict = {}
    for (_, op), durations in per_node.items():
        by_op[op] = by_op.get(op, 0) + sorted(durations)[len(durations) // 2]
    total = sum(by_op.values()) or 1
    return {op: round(us / total, 4) for op, us in sorted(by_op.items())}


def graph_counts(optimized: Path) -> dict:
    """Node counts of an optimized ORT graph: all, Reorder*, com.microsoft*, opforge."""
    import onnx

    nodes = onnx.load(str(optimized), load_external_data=False).graph.node
    return {"nodes": len(nodes),
            "reorder": sum(n.op_type.startswith("Reorder") for n in nodes),
            "com_microsoft": sum(n.domain.startswith("com.microsoft") for n in nodes),
            "opforge": sum(n.domain == "opforge" for n in nodes),
            "fused": sorted({f"{n.domain}::{n.op_type}" for n in nodes
                             if n.domain.startswith("com.microsoft") and not n.op_type.startswith("Reorder")})}


def export(model, args, path: Path, decomposed) -> Path:
    from opforge_torch import onnx as opforge_onnx

    with torch.no_grad():
        opforge_onnx.export(model, args, str(path), decomposed=decomposed, opset_version=21)
    return path


def _feeds(session, args) -> dict:
    return {i.name: a.numpy() for i, a in zip(session.get_inputs(), args)}


def time_eager(forms: dict, args, *, repeat: int, budget_s: float) -> dict:
    calls = {name: (lambda m=m: m(*args)) for name, m in forms.items()}  # bounds too: not checked
    with torch.inference_mode():
        return timing.measure_interleaved(calls, repeat=repeat, budget_s=budget_s)


def ort_forms(forms: dict, args, exports: dict, folder: Path, threads: int) -> tuple[dict, dict]:
    """Exports each (name, form, decomposed) of `exports`, opens it at ENABLE_ALL; returns the
    callables and each one's optimized-graph counts."""
    calls, counts = {}, {}
    for label, (form, decomposed) in exports.items():
        stem = folder / label.replace(" ", "_").replace("/", "_")
        path = export(forms[form], args, stem.with_suffix(".onnx"), decomposed)
        optimized = stem.with_suffix(".opt.onnx")
        session = ort_session(path, threads, optimized)
        feeds = _feeds(session, args)
        calls[label] = lambda s=session, f=feeds: s.run(None, f)
        counts[label] = {**graph_counts(optimized), "kernel_share": kernel_shares(path, args, threads)}
    return calls, counts


def _rows(model: str, layer: str, timings: dict, baseline: str) -> list:
    base = timings[baseline]
    return [{"model": model, "layer": layer, "variant": name, "baseline": baseline,
             "median_ms": t.median_s * 1e3, "min_ms": t.min_s * 1e3, "runs": t.runs,
             "ratio": base.median_s / t.median_s, "ratio_of_mins": base.min_s / t.min_s}
            for name, t in timings.items()]


def _check_close(forms: dict, args, what: str) -> None:
    """Every form computes the baseline's result (the swaps are exact rewrites)."""
    with torch.inference_mode():
        results = [m(*args) for m in forms.values()]
    for name, result in zip(list(forms)[1:], results[1:]):
        # 1e-4, not fp32's default: a GEMM of another width sums in another order, and
        # EfficientNet's 16 blocks carry such differences through BatchNorm and SiLU
        def message(m: str, n: str = name) -> str:
            return f"{what}: {n} differs from the baseline: {m}"

        torch.testing.assert_close(result, results[0], rtol=1e-4, atol=1e-4, msg=message)


def measure_model(model: str, forms: dict, args, exports: dict, *, threads: int, repeat: int,
                  budget_s: float, bounds: dict | None = None) -> dict:
    """Eager and ORT timings and graph counts of one model's forms (the first form is the baseline;
    `exports`: label -> (form, decomposed argument), the first label the ORT baseline). `bounds`:
    forms timed beside them in eager torch that compute something else (a ceiling)."""
    torch.set_num_threads(threads)
    _check_close(forms, args, model)
    timed = {**forms, **(bounds or {})}
    rows = _rows(model, "torch", time_eager(timed, args, repeat=repeat, budget_s=budget_s),
                 next(iter(forms)))
    with tempfile.TemporaryDirectory() as tmp:
        calls, counts = ort_forms(forms, args, exports, Path(tmp), threads)
        ort_timings = timing.measure_interleaved(calls, repeat=repeat, budget_s=budget_s)
    rows += _rows(model, "ort", ort_timings, next(iter(exports)))
    return {"rows": rows, "graphs": {f"{model} / {k}": v for k, v in counts.items()}}


def efficientnet(threads: int, repeat: int, budget_s: float) -> dict:
    forms = models.efficientnets()
    base, ours = list(forms)
    exports = {"decomposed export": (base, True), "opforge Swish nodes": (ours, False),
               'opforge, decomposed="auto"': (ours, "auto")}
    args = (torch.randn(*SHAPES["image"], generator=torch.Generator().manual_seed(0)),)
    return measure_model("EfficientNet-B0", forms, args, exports, threads=threads, repeat=repeat,
                         budget_s=budget_s)


def llama_mlp(threads: int, repeat: int, budget_s: float) -> dict:
    forms = models.llama_mlps()
    hf, fused, cat = list(forms)
    exports = {"HF LlamaMLP": (hf, False), "gate_up Linear + opforge SwiGLU": (fused, "auto"),
               "cat of two Linears + opforge SwiGLU": (cat, "auto")}
    args = (torch.randn(1, SHAPES["tokens"], models.LLAMA_SHAPE["hidden_size"],
                        generator=torch.Generator().manual_seed(0)),)
    return measure_model("LLaMA MLP", forms, args, exports, threads=threads, repeat=repeat,
                         budget_s=budget_s, bounds={GEMMS_ALONE: models.GemmsAlone(forms[hf])})


def llama_layer(threads: int, repeat: int, budget_s: float) -> dict:
    config = models.llama_config()
    forms = models.llama_layers(config)
    hf, ours = list(forms)
    exports = {"HF LlamaDecoderLayer": (hf, False), 'opforge, decomposed="auto"': (ours, "auto"),
               "opforge, decomposed=True": (ours, True)}
    cos, sin = models.rotary(config, SHAPES["tokens"])
    args = (torch.randn(1, SHAPES["tokens"], config.hidden_size,
                        generator=torch.Generator().manual_seed(0)), cos, sin)
    return measure_model("LLaMA decoder layer", forms, args, exports, threads=threads,
                         repeat=repeat, budget_s=budget_s)


MODELS = {"efficientnet": efficientnet, "llama_mlp": llama_mlp, "llama_layer": llama_layer}


def missing_requirement(name: str) -> str | None:
    """Why a model cannot be built here (None: it can)."""
    needs = ("torchvision",) if name == "efficientnet" else ("transformers",)
    for module in needs:
        try:
            __import__(module)
        except (ImportError, RuntimeError, OSError) as exc:  # torchvision's C ops beside another torch
            return f"{module} does not import: {str(exc).splitlines()[0][:160]}"
    return None


def run(names, *, threads: int, repeat: int, budget_s: float) -> dict:
    data: dict[str, Any] = {"rows": [], "graphs": {}, "not_measured": {}, "threads": threads}
    for name in names:
        why = missing_requirement(name)
        if why:
            data["not_measured"][name] = why
            continue
        result = MODELS[name](threads, repeat, budget_s)
        data["rows"] += result["rows"]
        data["graphs"].update(result["graphs"])
    data["targets"] = targets(data)
    return data


def _row(rows, model, layer, variant):
    return next((r for r in rows if (r["model"], r["layer"], r["variant"]) == (model, layer, variant)),
                None)


# (id, model, layer, variant, bar, text); the ratio is against the layer's baseline
TARGETS = (
    ("efficientnet_ort_auto", "EfficientNet-B0", "ort", 'opforge, decomposed="auto"', 1.0,
     'EfficientNet-B0 exported with decomposed="auto" >= 1.0x the decomposed export (ORT)'),
    ("mlp_torch_gate_up", "LLaMA MLP", "torch", "gate_up Linear + opforge SwiGLU", MLP_TARGET,
     "LLaMA MLP, gate_up Linear + opforge SwiGLU >= 1.1x HF LlamaMLP (eager torch)"),
    ("mlp_ort_gate_up", "LLaMA MLP", "ort", "gate_up Linear + opforge SwiGLU", MLP_TARGET,
     "LLaMA MLP, gate_up Linear + opforge SwiGLU >= 1.1x HF LlamaMLP (ORT)"),
)


def targets(data: dict) -> list:
    out = []
    for tid, model, layer, variant, bar, text in TARGETS:
        row = _row(data["rows"], model, layer, variant)
        if row is None:
            out.append({"id": tid, "target": text, "bar": bar, "status": "not measured"})
            continue
        target = {"id": tid, "target": text, "bar": f"{bar}x", "ratio": row["ratio"],
                  "ratio_of_mins": row["ratio_of_mins"], "measured": f"{row['ratio']:.2f}x",
                  "status": "met" if row["ratio"] >= bar else "missed"}
        ceiling = fusion_ceiling(data, model, layer)
        if ceiling is not None:
            target["ceiling"] = ceiling
            target["measured"] += f" (ceiling {ceiling:.2f}x)"
            if target["status"] == "missed" and ceiling < bar:
                target["status"] = "missed: above the ceiling"
        out.append(target)
    reorder = {k.split(" / ")[1]: v["reorder"] for k, v in data["graphs"].items()
               if k.startswith("EfficientNet-B0")}
    if reorder:
        auto, base = reorder['opforge, decomposed="auto"'], reorder["decomposed export"]
        out.append({"id": "efficientnet_reorder", "bar": f"<= {base}", "count": auto,
                    "measured": f"{auto} (opforge Swish nodes: {reorder['opforge Swish nodes']})",
                    "target": 'EfficientNet-B0 with decomposed="auto": no more Reorder nodes than '
                              "the decomposed export",
                    "status": "met" if auto <= base else "missed"})
    return out


def fusion_ceiling(data: dict, model: str, layer: str) -> float | None:
    """The most an activation fusion can gain on the model's baseline: eager torch, the baseline's
    time over its GEMMs' alone (timed beside it); ORT, 1 / the GEMMs' share of the baseline's
    kernel time (ORT's profiler). None where neither was measured."""
    if layer == "torch":
        alone = _row(data["rows"], model, "torch", GEMMS_ALONE)
        return None if alone is None else alone["ratio"]
    baseline = next((r["baseline"] for r in data["rows"] if (r["model"], r["layer"]) == (model, "ort")), None)
    shares = data["graphs"].get(f"{model} / {baseline}", {}).get("kernel_share", {})
    gemms = sum(share for op, share in shares.items() if op in GEMM_OPS)
    return 1.0 / gemms if gemms > 0 else None


def headline_numbers(data: dict) -> dict:
    numbers = {f"bench.models.target.{t['id']}.met": int(t["status"] == "met")
               for t in data["targets"] if t["status"] != "not measured"}
    numbers.update({f"bench.models.target.{t['id']}.ratio": round(t["ratio"], 3)
                    for t in data["targets"] if "ratio" in t})
    numbers.update({f"bench.models.target.{t['id']}.ceiling": round(t["ceiling"], 3)
                    for t in data["targets"] if "ceiling" in t})
    for key, counts in data["graphs"].items():
        numbers[f"bench.models.reorder.{_slug(key)}"] = counts["reorder"]
    return numbers


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in text).strip("_")


def markdown(data: dict) -> str:
    shape = models.LLAMA_SHAPE
    setup = (f"- {data['threads']} threads; forms of one model and layer timed round-robin (ORT "
             "sessions with spinning off, so one session's idle pool takes no core from the next); "
             "ORT at ORT_ENABLE_ALL with opforge_ort registered, opset 21, dynamo exporter; random "
             f"weights, EfficientNet-B0 at {'x'.join(map(str, SHAPES['image']))}, LLaMA-style "
             f"layers at {SHAPES['tokens']} tokens, hidden {shape['hidden_size']}, intermediate "
             f"{shape['intermediate_size']}")
    lines = ["", "## Real models (ratio = baseline median / variant median; >1 is faster)", "",
             setup, "",
             "| target | bar | measured (medians) | ratio of mins | status |", "|---|---|---|---|---|"]
    for t in data["targets"]:
        measured = t.get("measured", "-")
        mins = f"{t['ratio_of_mins']:.2f}x" if "ratio_of_mins" in t else "-"
        lines.append(f"| {t['target']} | {t['bar']} | {measured} | {mins} | **{t['status']}** |")
    lines += ["", "| model | layer | variant | median ms | min ms | runs | ratio | ratio of mins |",
              "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['model']} | {r['layer']} | {r['variant']} | {r['median_ms']:.2f} | "
              f"{r['min_ms']:.2f} | {r['runs']} | {r['ratio']:.2f}x | {r['ratio_of_mins']:.2f}x |"
              for r in data["rows"]]
    lines += ["", ("ORT's optimized graphs (ORT_ENABLE_ALL): nodes, Reorder nodes of the NCHWc "
                   "layout pass, com.microsoft nodes, opforge nodes, the fused ops present:"), ""]
    lines += [f"- {k}: {v['nodes']} nodes, {v['reorder']} Reorder, {v['com_microsoft']} "
              f"com.microsoft, {v['opforge']} opforge; {', '.join(v['fused']) or 'no fusion'}; "
              "share of kernel time (ORT profiler): "
              + ", ".join(f"{op} {share:.1%}" for op, share in v.get("kernel_share", {}).items())
              for k, v in data["graphs"].items()]
    lines += [f"- not measured: {k}: {v}" for k, v in data["not_measured"].items()]
    return "\n".join(lines) + "\n"


def plot(data: dict, out: Path) -> list:
    try:
        import matplotlib
    except ImportError:
        return []
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = list(dict.fromkeys((r["model"], r["layer"]) for r in data["rows"]))
    if not panels:
        return []
    fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels), 4.2), squeeze=False)
    for ax, (model, layer) in zip(axes[0], panels):
        rows = [r for r in data["rows"] if (r["model"], r["layer"]) == (model, layer)]
        ax.bar(range(len(rows)), [r["ratio"] for r in rows], color=[f"C{i}" for i in range(len(rows))])
        ax.scatter(range(len(rows)), [r["ratio_of_mins"] for r in rows], color="k", marker="_",
                   s=200, label="ratio of mins", zorder=3)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xticks(range(len(rows)), [r["variant"] for r in rows], rotation=60, ha="right",
                      fontsize=6)
        ax.set_title(f"{model}\n{layer}", fontsize=8)
        ax.set_ylabel("speed vs baseline (x)")
        ax.legend(fontsize=6)
    fig.suptitle("Real models: speed vs the model's own form (medians; bars)")
    fig.tight_layout()
    path = out / "bench_models.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return [str(path)]


def write(data: dict, out: Path) -> list:
    """models.json, bench_models.png, and the section appended to bench.md."""
    import json

    out.mkdir(parents=True, exist_ok=True)
    (out / "models.json").write_text(json.dumps(data, indent=1))
    with open(out / "bench.md", "a") as md:
        md.write(markdown(data))
    return [str(out / "models.json"), *plot(data, out)]
