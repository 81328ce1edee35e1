"""The GPU bench's plan (dtypes, shapes, modes, variants, targets) and its report: bench.json,
bench.md and bench_gpu.png. Imports no torch: ci/gpu_check.py writes the same targets, each
`skipped: <reason>`, where nothing could run."""
from __future__ import annotations

import itertools
import re
from pathlib import Path

from . import report

DTYPES = ("float32", "bfloat16", "float16")
TARGET_DTYPES = ("float32", "bfloat16")
MODES = ("forward", "forward+backward")
TOKENS = (1, 128, 4096, 16384)
HIDDEN = (4096, 8192)
GATED_WIDTH = 14336  # the gated ops: X [tokens, 2 x 14336] (an 8B-class MLP)

COPY = "D2D copy (same bytes)"
EAGER = "torch eager (composed)"
COMPILE = "torch.compile (Inductor)"
LIGER = "Liger-Kernel"
OPFORGE = "opforge_torch"
TORCH_VARIANTS = (EAGER, COMPILE, LIGER, OPFORGE)

FLUSH_BELOW_L2 = 4  # runs moving fewer bytes than this x L2 get the L2 flushed first
COPY_BARS = {"forward": 0.85, "forward+backward": 0.70}
PEER_BAR = 1.0
# Liger-Kernel's autograd Function for an op (torch name -> "module.Class"): the op gets a Liger
# target; an op not listed gets none, with the reason (NO_LIGER's, else a generic one).
LIGER_KERNELS = {
    "rms_norm": "liger_kernel.ops.rms_norm.LigerRMSNormFunction",
    "swiglu": "liger_kernel.ops.swiglu.LigerSiLUMulFunction",
    "geglu": "liger_kernel.ops.geglu.LigerGELUMulFunction",
    "add_rms_norm": "liger_kernel.ops.fused_add_rms_norm.LigerFusedAddRMSNormFunction",
}
NO_LIGER = {"swish": "Liger-Kernel has no Swish (SiLU) kernel of its own"}


def why_no_liger(torch_name: str) -> str:
    return NO_LIGER.get(torch_name, f"no Liger-Kernel kernel is listed for {torch_name} "
                                    "(gpu_report.LIGER_KERNELS)")
# Forward outputs are compared with the eager form's: max |diff| / max |eager| above this is flagged.
AGREEMENT = {"float32": 1e-4, "bfloat16": 3e-2, "float16": 5e-3}


def spec_ops() -> list:
    """The op names of opforge_spec, in its order."""
    import opforge_spec

    return list(opforge_spec.OPS)


def gated(op: str) -> bool:
    """X's last axis holds the gate and the value (the spec's split): [tokens, 2 x width]."""
    import opforge_spec

    return opforge_spec.OPS[op].split > 1


def no_liger(ops) -> dict:
    """op -> why Liger is not compared for it."""
    import opforge_spec

    return {op: why_no_liger(opforge_spec.OPS[op].torch_name) for op in ops
            if opforge_spec.OPS[op].torch_name not in LIGER_KERNELS}


def widths(op: str) -> tuple:
    return (GATED_WIDTH,) if gated(op) else HIDDEN


def largest(op: str) -> tuple:
    """(tokens, width) at which the targets are judged."""
    return max(TOKENS), max(widths(op))


def modes(op: str) -> tuple:
    """MODES of an op with a gradient; "forward" only for an inference op (RMSNormQuant: no
    backward to time, and its int8/float8 outputs have no gradient to feed)."""
    import opforge_spec

    return MODES if opforge_spec.OPS[op].has_gradient else MODES[:1]


def configs(ops, *, quick: bool) -> list:
    """(op, dtype, mode, tokens, width) to measure, the targets' first: the largest shape in the
    target dtypes, then the rest (a run that reaches its time limit has judged the targets)."""
    out = []
    for op in ops:
        shapes = [largest(op)] if quick else list(itertools.product(TOKENS, widths(op)))
        out += [(op, dtype, mode, t, w) for dtype in DTYPES for mode in modes(op) for t, w in shapes]

    def later(cfg):
        op, dtype, _, tokens, width = cfg
        return ((tokens, width) != largest(op), dtype not in TARGET_DTYPES)

    return sorted(out, key=later)


# ------------------------------------------------------------------------------------ targets

def target_specs(ops) -> list:
    """(id, text, op, dtype, mode, kind, bar); kind: copy | COMPILE | LIGER."""
    without_liger = no_liger(ops)
    specs = []
    for op, dtype, mode in ((o, d, m) for o in ops for d in TARGET_DTYPES for m in modes(o)):
        slug = f"{op}.{dtype}.{'fwd' if mode == 'forward' else 'fwdbwd'}"
        bar = COPY_BARS[mode]
        specs.append((f"{slug}.copy", f"{op} {dtype} {mode} >= {bar:.0%} of D2D copy bandwidth",
                      op, dtype, mode, "copy", bar))
        specs.append((f"{slug}.compile", f"{op} {dtype} {mode} >= {PEER_BAR:.1f}x torch.compile",
                      op, dtype, mode, COMPILE, PEER_BAR))
        if op not in without_liger:
            specs.append((f"{slug}.liger", f"{op} {dtype} {mode} >= {PEER_BAR:.1f}x Liger-Kernel",
                          op, dtype, mode, LIGER, PEER_BAR))
    return specs


def skipped_targets(ops, reason: str) -> list:
    """Every target, `skipped: <reason>` (no GPU, the build failed, ...)."""
    return [{"id": tid, "target": text, "bar": bar, "status": f"skipped: {reason}"}
            for tid, text, *_, bar in target_specs(ops)]


def find(rows, op, dtype, mode, tokens, width, variant):
    for r in rows:
        if (r["layer"], r["op"], r["dtype"], r["mode"], r["tokens"], r["width"], r["variant"]) == \
                ("torch", op, dtype, mode, tokens, width, variant):
            return r
    return None


def why_missing(reasons: dict, op, dtype, mode, variant) -> str:
    """The recorded reason a row is missing: of the config, else of the variant for the op."""
    for key in (f"{op} {dtype} {mode} {variant}", f"{op} {dtype} {mode}", f"{op} {variant}",
                variant):
        if key in reasons:
            return reasons[key]
    return "not measured"


def targets(rows: list, ops, reasons: dict) -> list:
    """Each target at the op's largest shape: met / missed with the numbers, else skipped with
    the reason its numbers are missing."""
    out = []
    for tid, text, op, dtype, mode, kind, bar in target_specs(ops):
        tokens, width = largest(op)
        ours = find(rows, op, dtype, mode, tokens, width, OPFORGE)
        theirs = None if kind == "copy" else find(rows, op, dtype, mode, tokens, width, kind)
        entry = {"id": tid, "target": text, "bar": bar}
        missing = [v for v, r in ((OPFORGE, ours), (kind, theirs)) if r is None and v != "copy"]
        if missing:
            entry["status"] = f"skipped: {why_missing(reasons, op, dtype, mode, missing[0])}"
        elif kind == "copy":
            entry.update(ratio=ours["x_copy"], detail=f"{ours['gbps']:.0f} GB/s vs copy "
                         f"{ours['copy_gbps']:.0f} GB/s")
        else:
            assert theirs is not None  # not missing
            entry.update(ratio=theirs["median_ms"] / ours["median_ms"],
                         detail=f"{ours['median_ms']:.3f} ms vs {kind} {theirs['median_ms']:.3f} ms")
        if "ratio" in entry:
            entry["status"] = "met" if entry["ratio"] >= bar else "missed"
        out.append(entry)
    return out


def headline_numbers(data: dict) -> dict:
    numbers = {"bench.gpu.measured": int(bool(data.get("device")))}
    for t in data["targets"]:
        if "ratio" in t:
            numbers[f"bench.gpu.target.{_slug(t['id'])}.ratio"] = round(t["ratio"], 3)
            numbers[f"bench.gpu.target.{_slug(t['id'])}.met"] = int(t["status"] == "met")
    numbers["bench.gpu.targets_met"] = sum(t["status"] == "met" for t in data["targets"])
    numbers["bench.gpu.targets_missed"] = sum(t["status"] == "missed" for t in data["targets"])
    return numbers


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.]+", "_", text).strip("_")


# ----------------------------------------------------------------------------------- markdown

def markdown(data: dict) -> str:
    lines = ["# opforge GPU benchmarks", "", *_header(data), "", "## Targets (largest shapes)", "",
             *target_table(data["targets"]), "", "## Peers", ""]
    lines += [f"- {name}: {state}" for name, state in data["peers"].items()]
    if data.get("skipped"):
        return "\n".join(lines + ["", f"Every measurement: skipped: {data['skipped']}", ""])
    for op in data["ops"]:
        for mode in MODES:
            lines += _op_table(data["rows"], op, mode)
    lines += _agreement(data)
    lines += ["", "## Not measured", ""] + [f"- {k}: {v}" for k, v in data["not_measured"].items()]
    return "\n".join(lines) + "\n"


def target_table(target_rows: list) -> list:
    lines = ["| target | bar | measured | status | detail |", "|---|---|---|---|---|"]
    for t in target_rows:
        measured = f"{t['ratio']:.2f}x" if "ratio" in t else "-"
        lines.append(f"| {t['target']} | {t['bar']}x | {measured} | **{t['status']}** | "
                     f"{t.get('detail', '')} |")
    return lines


def _header(data: dict) -> list:
    if data.get("skipped"):
        return [f"- device: skipped: {data['skipped']} ({data.get('skipped_detail', '')})",
                f"- versions: {', '.join(f'{k} {v}' for k, v in data['versions'].items())}"]
    d = data["device"]
    return [(f"- device: {d['name']} (sm_{d['capability'].replace('.', '')}, {d['sms']} SMs, L2 "
             f"{d['l2_bytes'] / 2**20:.0f} MiB, {d['memory_bytes'] / 2**30:.0f} GiB)"),
            f"- versions: {', '.join(f'{k} {v}' for k, v in data['versions'].items())}",
            ("- timing: CUDA events around each call after warm-up; the median of "
             f"{_runs(data['rows'])} runs; L2 flushed (a {2 * d['l2_bytes'] / 2**20:.0f} MiB "
             "buffer written) before each run whose bytes are under "
             f"{data['flush_below_l2']}x L2; ORT rows: host clock around a synchronous IOBinding run"),
            ("- GB/s = bytes a fused kernel must move (inputs read once, outputs written once; "
             "backward: output gradients and saved inputs read, input gradients written) / median; "
             "% copy = that / a device-to-device copy of the same bytes"),
            f"- {'quick set: the largest shapes' if data['quick'] else 'every shape'}"
            + (f"; time limit {data['time_limit_s']:.0f} s" if data.get("time_limit_s") else "")]


def _runs(rows) -> str:
    runs = [r["runs"] for r in rows]
    return f"{min(runs)} to {max(runs)}" if runs else "no"


def _op_table(rows, op, mode) -> list:
    mine = [r for r in rows if r["op"] == op and r["mode"] == mode]
    if not mine:
        return []
    shapes = sorted({(r["tokens"], r["width"]) for r in mine})
    lines = ["", f"## {op}, {mode}: GB/s (% of D2D copy); median ms at the largest shape", "",
             "| variant | dtype | " + " | ".join(_shape_text(op, s) for s in shapes) + " | ms |",
             "|---|---|" + "---|" * (len(shapes) + 1)]
    for (layer, variant), dtype in itertools.product(
            dict.fromkeys((r["layer"], r["variant"]) for r in mine), DTYPES):
        cells = {(r["tokens"], r["width"]): r for r in mine
                 if (r["layer"], r["variant"], r["dtype"]) == (layer, variant, dtype)}
        if not cells:
            continue
        last = cells[max(cells)]
        lines.append(f"| {variant} | {dtype} | " + " | ".join(
            f"{cells[s]['gbps']:.0f} ({cells[s]['x_copy']:.0%})" if s in cells else "-"
            for s in shapes) + f" | {last['median_ms']:.3f} |")
    return lines


def _shape_text(op, shape) -> str:
    tokens, width = shape
    return f"[{tokens}, 2x{width}]" if gated(op) else f"[{tokens}, {width}]"


def _agreement(data) -> list:
    flagged = [r for r in data["rows"] if r.get("max_rel_diff") is not None
               and r["max_rel_diff"] > AGREEMENT[r["dtype"]]]
    lines = ["", ("## Agreement (forward outputs against the eager form; ORT rows against ORT's "
                  "first variant)"), ""]
    if not flagged:
        return lines + [("Every forward output agreed with the eager form's (max |diff| / max "
                         f"|eager| within {', '.join(f'{k} {v:g}' for k, v in AGREEMENT.items())}).")]
    return lines + [(f"- **{r['op']} {r['dtype']} {r['variant']} [{r['tokens']}, {r['width']}]**: "
                     f"max |diff| / max |eager| = {r['max_rel_diff']:.2e}") for r in flagged]


# -------------------------------------------------------------------------------------- files

def plot(data: dict, out: Path) -> list:
    """bench_gpu.png: % of copy vs tokens, one panel per op and mode, a line per variant and
    dtype (one file: the GPU check brings back at most 8)."""
    if not data["rows"]:
        return []
    try:
        import matplotlib
    except ImportError:
        data["not_measured"]["plots"] = "matplotlib is not installed: no PNG"
        return []
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ops = [op for op in data["ops"] if any(r["op"] == op for r in data["rows"])]
    fig, axes = plt.subplots(len(ops), len(MODES), figsize=(13, 3.6 * len(ops)), squeeze=False)
    for (i, op), (j, mode) in itertools.product(enumerate(ops), enumerate(MODES)):
        _panel(axes[i][j], [r for r in data["rows"] if r["op"] == op and r["mode"] == mode],
               f"{op}, {mode}")
    fig.tight_layout()
    path = out / "bench_gpu.png"
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return [str(path)]


def _panel(ax, rows, title) -> None:
    styles = dict(zip(DTYPES, ("-", "--", ":")))
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    for variant, dtype in itertools.product(variants, DTYPES):
        points = sorted((r["tokens"] * r["width"], r["x_copy"]) for r in rows
                         if (r["variant"], r["dtype"]) == (variant, dtype))
        if points:
            ax.plot(*zip(*points), styles[dtype], marker="o", ms=3,
                    color=f"C{variants.index(variant) % 10}", label=f"{variant} {dtype}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("tokens x width")
    ax.set_ylabel("x D2D copy bandwidth")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=6)


def write(data: dict, out: Path) -> list:
    return report.write(data, out, render_plots=plot, render_markdown=markdown)
