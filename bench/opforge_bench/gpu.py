"""The GPU bench's measurements: per op x dtype x shape x mode, opforge_torch against the composed
eager form, torch.compile of it, Liger-Kernel and a device-to-device copy of the same bytes.

CUDA events around each call after warm-up, the median of the runs; the L2 cache is flushed
before each run whose bytes are under gpu_report.FLUSH_BELOW_L2 x L2 (larger ones stream past it anyway).
The same loop runs on the CPU with a host clock (HostTimer): bench/tests drive it there."""
from __future__ import annotations

import contextlib
import math
import statistics
import time

import torch

from . import gpu_forms
from . import gpu_report as plan
from .timing import Timing

WARMUP = 3
MIN_RUNS, MAX_RUNS = 10, 100
RUN_SECONDS = 0.05  # timed seconds per variant, about: the run count follows from one call's time
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class CudaTimer:
    """CUDA events around each call; the flush buffer (2 x L2) is written before a flushed run."""

    def __init__(self, device: torch.device):
        self.device = device
        self.l2_bytes = torch.cuda.get_device_properties(device).L2_cache_size
        self._flush = torch.empty(2 * self.l2_bytes, dtype=torch.uint8, device=device)

    def samples(self, fn, runs: int, flush: bool) -> list:
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(runs)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(runs)]
        for start, end in zip(starts, ends):
            if flush:
                self._flush.zero_()
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize(self.device)
        return [s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends)]


class HostTimer:
    """The same loop on the CPU (no cache flush: only its logic is under test there)."""

    l2_bytes = 0

    def samples(self, fn, runs: int, flush: bool) -> list:
        out = []
        for _ in range(runs):
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
        return out


def measure(fn, timer, *, flush: bool) -> Timing:
    for _ in range(WARMUP):
        fn()
    probe = statistics.median(timer.samples(fn, 3, flush))
    runs = min(MAX_RUNS, max(MIN_RUNS, math.ceil(RUN_SECONDS / max(probe, 1e-7))))
    samples = timer.samples(fn, runs, flush)
    return Timing(statistics.median(samples), min(samples), max(samples), len(samples))


def peers(device: str) -> dict:
    """Each peer's state for this run: "" when it can run, else why not."""
    found = {plan.OPFORGE: _import_reason("opforge_torch"), plan.LIGER: _import_reason("liger_kernel"),
             plan.COMPILE: ""}
    if device == "cuda" and _import_reason("triton"):
        found[plan.COMPILE] = f"Inductor has no GPU code generator here: {_import_reason('triton')}"
    return found


def _import_reason(module: str) -> str:
    try:
        __import__(module)
    except Exception as err:  # noqa: BLE001  ImportError, or OSError from a library built for another torch
        return f"{module} not importable: {why(err)}"
    return ""


def op_reasons(op_name: str, torch_name: str, found: dict) -> dict:
    """Variants that cannot run for this op, with the reason (keys as gpu_report.why_missing reads)."""
    form = gpu_forms.FORMS.get(torch_name)
    if form is None:
        return {f"{op_name} {v}": f"no GPU bench form for {torch_name} (bench/opforge_bench/gpu_forms.py)"
                for v in plan.TORCH_VARIANTS}
    out = {f"{op_name} {v}": why for v, why in found.items() if why}
    if not found[plan.OPFORGE] and not hasattr(torch.ops.opforge, torch_name):
        out[f"{op_name} {plan.OPFORGE}"] = f"this opforge_torch has no torch.ops.opforge.{torch_name}"
    if form.liger is None:
        out[f"{op_name} {plan.LIGER}"] = plan.why_no_liger(torch_name)
    elif not found[plan.LIGER]:
        try:
            gpu_forms.liger_function(form)
        except (ImportError, AttributeError) as err:
            out[f"{op_name} {plan.LIGER}"] = f"this liger_kernel has no {form.liger}: {why(err)}"
    return out


def why(err: BaseException) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0][:300]}" if text else type(err).__name__


def _callables(form, inputs: tuple, skip: set) -> dict:
    """{variant: (fn, the tensors it takes)} for the variants that may run."""
    fns = {plan.EAGER: (form.composed, inputs)}
    if plan.COMPILE not in skip:
        torch._dynamo.reset()  # a fresh cache per config: no silent eager fallback at a recompile limit
        fns[plan.COMPILE] = (torch.compile(form.composed, dynamic=False, fullgraph=True), inputs)
    if plan.OPFORGE not in skip:
        fns[plan.OPFORGE] = (form.opforge, inputs)
    if plan.LIGER not in skip:
        function = gpu_forms.liger_function(form)
        tensors, extra = form.liger_args(*inputs)
        fns[plan.LIGER] = (lambda *t: function.apply(*t, *extra), tensors)
    return fns


def _forward_step(fn, tensors):
    def step():
        with torch.no_grad():
            return fn(*tensors)
    return step


def _backward_step(fn, tensors, grads):
    leaves = tuple(t.detach().requires_grad_() for t in tensors)

    def step():
        return torch.autograd.grad(gpu_forms.as_tuple(fn(*leaves)), leaves, grads)
    return step


def _agreement(out, reference) -> float:
    worst = 0.0
    for o, r in zip(gpu_forms.as_tuple(out), gpu_forms.as_tuple(reference)):
        scale = r.float().abs().max().clamp_min(1e-30)
        worst = max(worst, float((o.float() - r.float()).abs().max() / scale))
    return worst


def measure_config(cfg, form, *, skip: set, timer, device: str, reasons: dict) -> list:
    """Rows of one (op, dtype, mode, tokens, width): the copy and each variant that ran."""
    op, dtype, mode, tokens, width = cfg
    inputs = form.inputs(tokens, width, DTYPES[dtype], device)
    with torch.no_grad():
        reference = gpu_forms.as_tuple(form.composed(*inputs))
    moved = (gpu_forms.forward_bytes if mode == "forward" else
             lambda i, o: gpu_forms.forward_bytes(i, o) + gpu_forms.backward_bytes(i, o))(inputs, reference)
    flush = moved < plan.FLUSH_BELOW_L2 * timer.l2_bytes
    copy = _time_copy(moved, device, timer, flush)
    base = {"layer": "torch", "op": op, "dtype": dtype, "mode": mode, "tokens": tokens,
            "width": width, "bytes": moved, "l2_flushed": flush,
            "copy_gbps": moved / copy.median_s / 1e9}
    rows = [_row(base, plan.COPY, copy)]
    gen = torch.Generator(device=device).manual_seed(1)
    grads = tuple(torch.randn(r.shape, dtype=r.dtype, device=r.device, generator=gen) for r in reference)
    for variant, (fn, tensors) in _callables(form, inputs, skip).items():
        try:
            step = (_forward_step(fn, tensors) if mode == "forward" else
                    _backward_step(fn, tensors, grads))
            timing = measure(step, timer, flush=flush)
            extra = {} if mode != "forward" or variant == plan.EAGER else \
                {"max_rel_diff": _agreement(step(), reference)}
        except Exception as err:  # noqa: BLE001  a peer that fails here is reported, not fatal
            reasons[f"{op} {dtype} {mode} {variant}"] = why(err)
            continue
        rows.append({**_row(base, variant, timing), **extra})
    return rows


def _row(base: dict, variant: str, timing: Timing) -> dict:
    gbps = base["bytes"] / timing.median_s / 1e9
    return {**base, "variant": variant, "median_ms": timing.median_s * 1e3,
            "min_ms": timing.min_s * 1e3, "max_ms": timing.max_s * 1e3, "runs": timing.runs,
            "gbps": gbps, "x_copy": gbps / base["copy_gbps"]}


def _time_copy(moved: int, device: str, timer, flush: bool) -> Timing:
    """A device-to-device copy that reads and writes `moved` bytes in all."""
    src = torch.empty(max(moved // 2, 1), dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    return measure(lambda: dst.copy_(src), timer, flush=flush)


def measure_all(ops, *, quick: bool, timer, device: str, deadline: float | None = None,
                configs=None, variants=plan.TORCH_VARIANTS, log=print) -> dict:
    """Every config of `ops` (spec names; default: gpu_report.configs, in its order) until the
    deadline, for `variants` (the eager form always: the others are checked against it)."""
    import opforge_spec

    found = peers(device)
    reasons, rows = {}, []
    for op in ops:
        reasons.update(op_reasons(op, opforge_spec.OPS[op].torch_name, found))
    for cfg in configs if configs is not None else plan.configs(ops, quick=quick):
        op, dtype, mode, tokens, width = cfg
        if deadline is not None and time.monotonic() > deadline:
            reasons[f"{op} {dtype} {mode}"] = "not measured: the bench's time limit was reached"
            continue
        form = gpu_forms.FORMS.get(opforge_spec.OPS[op].torch_name)
        if form is None:
            continue
        skip = {v for v in plan.TORCH_VARIANTS if f"{op} {v}" in reasons or v not in variants}
        started = time.monotonic()
        with _freed(device):
            rows += measure_config(cfg, form, skip=skip, timer=timer, device=device, reasons=reasons)
        log(f"  {op} {dtype} {mode} [{tokens}, {width}]: {time.monotonic() - started:.1f} s")
    return {"rows": rows, "not_measured": reasons, "peers": _peer_states(found)}


@contextlib.contextmanager
def _freed(device: str):
    try:
        yield
    finally:
        if device == "cuda":
            torch.cuda.empty_cache()


def _peer_states(found: dict) -> dict:
    return {name: (f"skipped: {why}" if why else "measured") for name, why in found.items()}
