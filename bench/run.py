"""Fused vs composed benchmarks of the opforge ops, torch and ONNX Runtime layers (CPU, fp32).

  python bench/run.py [--quick] [--out build/bench] [--ops Swish,RMSNorm,SwiGLU,AddRMSNorm]
                      [--layers torch,ort]
                      [--threads 1,all] [--repeat 20] [--budget 8]
                      [--models efficientnet,llama_mlp,llama_layer|none] [--hf-models LLaMA,Gemma3|none]
  python bench/run.py --device cuda [--quick] [--out DIR] [--ops ...] [--time-limit SECONDS]

Writes OUT/bench.json, OUT/bench.md (tables, targets met/missed), OUT/bench_<op>_<layer>.png and
the stage result ($OPFORGE_STAGE_RESULT: headline ratios). Not a test: it never fails on slow
numbers; it exits non-zero only if it could not measure. --quick: 3 sizes (16 KiB to 64 MiB of
input), for CI smoke runs; the full run goes to >= 4x the last-level cache, but never beyond what
half of the available memory holds (bench.json records the peak RSS).

--device cuda: the GPU bench (opforge_bench/gpu*.py, bench/README.md); --quick there: the largest
shapes only. Without a GPU it writes the same report, every part `skipped: no GPU`.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from opforge_bench import timing

REPO = Path(__file__).resolve().parent.parent


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=REPO / "build" / "bench")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--ops", default="", help="comma list (default: the ops the targets judge "
                                                  "on the CPU, Swish,RMSNorm,SwiGLU,AddRMSNorm; "
                                                  "every op of the spec on the GPU)")
    parser.add_argument("--layers", default="torch,ort")
    parser.add_argument("--models", default="efficientnet,llama_mlp,llama_layer",
                        help="real-model section (opforge_bench/real_models.py); 'none' skips it")
    parser.add_argument("--hf-models", default="LLaMA,Gemma3",
                        help="Hugging Face models section (opforge_bench/hf_models.py: transformers' "
                             "models, patched vs not, tokens/s); 'none' skips it")
    parser.add_argument("--threads", default="1,all", help="comma list; 'all' = every CPU we may use")
    parser.add_argument("--sizes", default="", help="comma list of element counts (default: by LLC)")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--budget", type=float, default=8.0, metavar="SECONDS",
                        help="timed rounds of one op, size and layer stop after this many seconds "
                             f"(each variant keeps at least {timing.MIN_RUNS} runs)")
    parser.add_argument("--time-limit", type=float, default=None, metavar="SECONDS",
                        help="--device cuda: measure no new shape after this many seconds (the "
                             "targets' shapes come first)")
    return parser.parse_args(argv)


def versions() -> dict:
    out = {}
    for name in ("torch", "onnxruntime", "numpy"):
        try:
            out[name] = __import__(name).__version__
        except ImportError:
            out[name] = "not installed"
    return out


def main(argv=None) -> int:
    args = parse(argv)
    if args.device == "cuda":
        from opforge_bench import gpu_run

        return gpu_run.main(args)
    return cpu_main(args)


def cpu_main(args) -> int:
    from opforge_bench import measure, report

    host = timing.host_info()
    threads = [host["cpus_available"] if t == "all" else int(t) for t in args.threads.split(",")]
    threads = list(dict.fromkeys(threads))
    sizes = ([int(s) for s in args.sizes.split(",")] if args.sizes
             else timing.sizes(quick=args.quick, llc=host["llc_bytes"],
                               memory=host["memory_available_bytes"]))
    print(f"bench: sizes {sizes}, threads {threads}, load {host['loadavg_1m_at_start']:.2f}")
    data = measure.run_all(ops=args.ops.split(",") if args.ops else list(report.DEFAULT_OPS),
                           layers=set(args.layers.split(",")),
                           threads_list=threads, sizes=sizes, repeat=args.repeat,
                           budget_s=args.budget)
    host["loadavg_1m_at_end"] = os.getloadavg()[0]
    # judged at the start: the load at the end includes this run's own threads
    host["busy"] = host["loadavg_1m_at_start"] > 0.5 * host["cpus_available"]
    data.update(host=host, versions=versions(), repeat=args.repeat, budget_s=args.budget,
                quick=args.quick)
    data["targets"] = report.targets(data["rows"], max(threads))
    # the same targets at every thread count: on a shared machine 1 thread is the steadier reading
    data["targets_by_threads"] = {t: report.targets(data["rows"], t) for t in threads}
    artifacts = report.write(data, args.out)
    numbers = report.headline_numbers(data["rows"], max(threads), data["targets"])
    if args.models != "none":
        from opforge_bench import real_models

        real = real_models.run(args.models.split(","), threads=max(threads), repeat=args.repeat,
                               budget_s=args.budget)
        artifacts += real_models.write(real, args.out)
        numbers.update(real_models.headline_numbers(real))
    if args.hf_models != "none":
        artifacts += hf_section(args, max(threads), numbers)
    numbers["bench.busy"] = int(host["busy"])
    numbers["bench.peak_rss_mib"] = round(data["peak_rss_bytes"] / 2**20, 1)
    _stage_result(numbers, artifacts)
    for t in data["targets"]:
        ratio = f"{t['ratio']:.2f}x" if "ratio" in t else "-"
        print(f"  {t['status']:>12}  {ratio:>7} (bar {t['bar']}x)  {t['target']}  {t.get('detail', '')}")
    print(f"bench: peak RSS {data['peak_rss_bytes'] / 2**30:.2f} GiB; wrote {args.out / 'bench.md'}")
    return 0 if data["rows"] else 1


def hf_section(args, threads: int, numbers: dict) -> list:
    """The Hugging Face models section appended to the report (--quick: its smoke-test size)."""
    from opforge_bench import hf_models

    data = hf_models.run(args.hf_models.split(","), quick=args.quick, threads=threads,
                         repeat=args.repeat, budget_s=args.budget)
    numbers.update(hf_models.headline_numbers(data))
    return hf_models.write(data, args.out)


def _stage_result(numbers: dict, artifacts: list) -> None:
    import json

    path = os.environ.get("OPFORGE_STAGE_RESULT")
    if path:
        Path(path).write_text(json.dumps({"numbers": numbers, "artifacts": artifacts}, indent=1))


if __name__ == "__main__":
    sys.exit(main())
