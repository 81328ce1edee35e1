"""bench/run.py --device cuda: the GPU bench, or its report with every part `skipped: <reason>`
where there is no GPU (the same files, the same targets)."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from . import gpu_report as plan

ORT_PEER = "ONNX Runtime CUDA EP (opforge_ort vs ORT's fused ops)"
PEERS = (plan.COMPILE, plan.LIGER, plan.OPFORGE, ORT_PEER)


NO_GPU = "no GPU"


def gpu_unavailable() -> str:
    """"" when torch sees a CUDA GPU, else what it sees instead."""
    try:
        import torch
    except ImportError as err:
        return f"torch not importable: {err}"
    if not torch.cuda.is_available():
        build = f"CUDA {torch.version.cuda} build" if torch.version.cuda else "a CPU-only build"
        return f"torch {torch.__version__} ({build}): torch.cuda.is_available() is False"
    return ""


def device_info() -> dict:
    import torch

    props = torch.cuda.get_device_properties(0)
    return {"name": props.name, "capability": f"{props.major}.{props.minor}",
            "sms": props.multi_processor_count, "l2_bytes": props.L2_cache_size,
            "memory_bytes": props.total_memory}


def versions() -> dict:
    from importlib import metadata

    out = {}
    for name in ("torch", "triton", "liger-kernel", "onnxruntime", "onnxruntime-gpu"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def skipped(ops, why: str, detail: str) -> dict:
    return {"device": None, "skipped": why, "skipped_detail": detail, "rows": [], "not_measured": {},
            "peers": {name: f"skipped: {why}" for name in PEERS},
            "targets": plan.skipped_targets(ops, why)}


def measured(ops, *, quick: bool, layers: set, time_limit_s: float | None) -> dict:
    import torch

    from . import gpu, gpu_ort

    deadline = time.monotonic() + time_limit_s if time_limit_s else None
    timer = gpu.CudaTimer(torch.device("cuda"))
    data = gpu.measure_all(ops, quick=quick, timer=timer, device="cuda", deadline=deadline)
    if "ort" not in layers:
        data["peers"][ORT_PEER] = "skipped: --layers has no ort"
    elif deadline is not None and time.monotonic() > deadline:
        data["peers"][ORT_PEER] = "skipped: the bench's time limit was reached"
    else:
        ort = gpu_ort.measure_all(device="cuda")
        data["rows"] += ort["rows"]
        data["not_measured"].update(ort["not_measured"])
        data["peers"][ORT_PEER] = ort["state"]
    data.update(device=device_info(), skipped=None,
                targets=plan.targets(data["rows"], ops, data["not_measured"]))
    return data


def main(args) -> int:
    ops = [op for op in plan.spec_ops() if op in args.ops.split(",")] if args.ops else plan.spec_ops()
    detail = gpu_unavailable()
    why = NO_GPU if detail else ""
    data = skipped(ops, why, detail) if why else measured(
        ops, quick=args.quick, layers=set(args.layers.split(",")), time_limit_s=args.time_limit)
    data.update(ops=ops, quick=args.quick, time_limit_s=args.time_limit, versions=versions(),
                flush_below_l2=plan.FLUSH_BELOW_L2)
    artifacts = plan.write(data, args.out)
    _stage_result(plan.headline_numbers(data), artifacts)
    if why:
        print(f"bench (cuda): skipped: {why} ({detail}); {len(data['targets'])} targets, each "
              f"skipped: {why}; wrote {args.out / 'bench.md'}")
        return 0
    for t in data["targets"]:
        ratio = f"{t['ratio']:.2f}x" if "ratio" in t else "-"
        print(f"  {t['status']:>10}  {ratio:>7} (bar {t['bar']}x)  {t['target']}")
    print(f"bench (cuda): measured; wrote {args.out / 'bench.md'}")
    if data["peers"][plan.OPFORGE] != "measured":  # a GPU, but nothing of ours to measure on it
        print(f"bench (cuda): {plan.OPFORGE}: {data['peers'][plan.OPFORGE]}")
        return 1
    return 0 if data["rows"] else 1


def _stage_result(numbers: dict, artifacts: list) -> None:
    path = os.environ.get("OPFORGE_STAGE_RESULT")
    if path:
        Path(path).write_text(json.dumps({"numbers": numbers, "artifacts": artifacts}, indent=1))
