"""One benchmark run: every op x layer x variant x threads x size, with the memcpy of the same
bytes timed in the same loop (the baseline every bandwidth is divided by).

Memory stays bounded: one set of arrays per (op, size) is shared by every variant (torch and ORT)
and dropped before the next, ORT sessions (and their arenas) live for one size only, and outputs
are compared on a bounded sample."""
from __future__ import annotations

import math
import resource
import time

import numpy as np

import opforge_spec

from . import torch_variants as tv
from .timing import measure_interleaved

BYTES_PER = 4  # float32
MEMCPY = "memcpy (torch copy_)"  # a row of every op's torch table: copy of X into a buffer like Y
AGREEMENT_SAMPLE = 1 << 20  # elements of each ORT output compared with the first variant's


def elements(op: str, n: int) -> int:
    """Input elements of (op, n)."""
    return math.prod(tv.input_shape(op, n))


def output_elements(op: str, n: int) -> int:
    return math.prod(tv.output_shape(op, n))


def moved_bytes(op: str, n: int) -> int:
    """Bytes a fused kernel must read and write: each input once (X and a residual R: X's
    elements; a weight W: one row), each output once (Y; a second output H: X's elements)."""
    spec = opforge_spec.OPS[op]
    read = sum(tv.COLS if name == "W" else elements(op, n) for name in spec.inputs)
    written = output_elements(op, n) + elements(op, n) * (len(spec.outputs) - 1)
    return BYTES_PER * (read + written)


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def row(key: tuple, *, threads, n, timing, memcpy_gbps, **extra) -> dict:
    op, layer, variant, allocating = key
    moved = 2 * BYTES_PER * output_elements(op, n) if variant == MEMCPY else moved_bytes(op, n)
    gbps = moved / timing.median_s / 1e9
    return {"op": op, "layer": layer, "variant": variant, "allocating": allocating,
            "threads": threads, "elements": elements(op, n), "bytes": moved,
            "median_ms": timing.median_s * 1e3, "min_ms": timing.min_s * 1e3,
            "max_ms": timing.max_s * 1e3, "runs": timing.runs, "gbps": gbps,
            "memcpy_gbps": memcpy_gbps, "x_memcpy": gbps / memcpy_gbps, **extra}


def run_all(*, ops, layers, threads_list, sizes, repeat, budget_s=None, log=print) -> dict:
    rows: list = []
    missing: dict = {}
    graphs: dict = {}
    rss: dict = {}
    for threads in threads_list:
        tv.set_threads(threads)
        for n in sizes:
            started = time.monotonic()
            for op in ops:
                rows += _measure_op(op, layers=layers, threads=threads, n=n, repeat=repeat,
                                    budget_s=budget_s, missing=missing, graphs=graphs)
            rss[n] = max(rss.get(n, 0), peak_rss_bytes())
            log(f"  threads={threads} n={n}: done in {time.monotonic() - started:.0f} s "
                f"({rows[-1]['memcpy_gbps']:.1f} GB/s memcpy, peak RSS {rss[n] / 2**30:.2f} GiB)")
    for op in ops:
        for name, why in tv.not_measured(op).items():
            missing[f"{op} torch {name}"] = why
    return {"rows": rows, "not_measured": missing, "ort_graphs": graphs,
            "peak_rss_bytes": peak_rss_bytes(), "peak_rss_bytes_after_size": rss}


def _measure_op(op, *, layers, threads, n, repeat, budget_s, missing, graphs) -> list:
    """One op at one size and thread count: the memcpy and the torch variants round-robin, then
    the ORT variants round-robin in blocks. (Not all in one loop: ORT's intra-op threads keep
    spinning after a run and would steal the cores from torch's threads on a small machine.)"""
    inp = tv.inputs(op, n)
    fns = {(op, "torch", MEMCPY, False): tv.memcpy(inp)}
    if "torch" in layers:
        for name, (fn, allocating) in tv.VARIANTS[op](inp).items():
            fns[(op, "torch", name, allocating)] = fn
    timings = measure_interleaved(fns, repeat=repeat, min_time_s=0.05, budget_s=budget_s)
    extra = {}
    if "ort" in layers:
        ort_fns = _ort_fns(op, threads, inp, missing, graphs)
        # blocks of 5: each session has its own intra-op pool, whose threads spin on after a
        # run and would steal the cores from the next session's pool on a small machine
        timings.update(measure_interleaved({k: fn for k, (fn, _) in ort_fns.items()},
                                           repeat=repeat, min_time_s=0.05, block=5,
                                           budget_s=budget_s))
        extra = {k: {"graph": graph} for k, (_, graph) in ort_fns.items()}
        del ort_fns  # the sessions and their arenas
    copy = timings[next(iter(fns))]
    memcpy_gbps = 2 * BYTES_PER * output_elements(op, n) / copy.median_s / 1e9
    return [row(key, threads=threads, n=n, timing=t, memcpy_gbps=memcpy_gbps, **extra.get(key, {}))
            for key, t in timings.items()]


def _sample(result) -> np.ndarray:
    """A copy of the first elements of each output (`result` can go)."""
    outputs = result if isinstance(result, (list, tuple)) else [result]
    share = AGREEMENT_SAMPLE // len(outputs)
    return np.concatenate([np.asarray(o).reshape(-1)[:share] for o in outputs])


def _ort_fns(op, threads, inp, missing, graphs) -> dict:
    try:
        from . import ort_variants as ov
    except ImportError as err:
        missing[f"{op} ort *"] = f"onnxruntime not importable: {err}"
        return {}
    sessions, why_not, after = ov.sessions(op, threads)
    for name, why in why_not.items():
        missing[f"{op} ort {name}"] = why
    graphs.update({f"{op} {k}": v for k, v in after.items()})
    out, reference = {}, None
    for name, sess in sessions.items():
        for mode, fn in ov.runners(sess, inp, op).items():
            sample = _sample(fn())
            reference = sample if reference is None else reference
            # float32 variants (fused, decomposed) that sum and round in their own order: the
            # spec's float32 bars of RMSNorm, the loosest of its ops'
            if not np.allclose(sample, reference, rtol=1e-4, atol=1e-5):
                missing[f"{op} ort {name} {mode}"] = "output disagrees with the first ORT variant"
            out[(op, "ort", name, mode == "alloc")] = (fn, after.get(name, []))
    return out
