"""Timing, the machine's cache sizes and the memcpy baseline."""
from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Timing:
    median_s: float
    min_s: float
    max_s: float
    runs: int


def measure(fn, *, repeat: int, warmup: int = 3, min_time_s: float = 0.0) -> Timing:
    """Warm-up calls, then `repeat` timed calls (more while the total is under min_time_s, so tiny
    sizes are not judged on 20 samples of a few microseconds)."""
    for _ in range(warmup):
        fn()
    samples: list[float] = []
    started = time.perf_counter()
    while len(samples) < repeat or (time.perf_counter() - started < min_time_s
                                    and len(samples) < 50 * repeat):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return Timing(statistics.median(samples), min(samples), max(samples), len(samples))


MIN_RUNS = 5            # timed calls per variant, whatever the budget
REWARM_BELOW_S = 0.005  # calls shorter than this are re-warmed before each timed block
WARMUP_BUDGET_S = 1.0   # warm-up calls of one variant stop here (after at least one)


def measure_interleaved(fns: dict, *, repeat: int, warmup: int = 3, min_time_s: float = 0.0,
                        block: int = 1, budget_s: float | None = None) -> dict:
    """Like `measure`, for several callables timed round-robin (`block` calls of each per round),
    so a change of machine load hits every variant alike and their ratios stay fair. `budget_s`
    bounds the timed rounds once every variant has MIN_RUNS samples: at the largest sizes one
    call takes a second, and `repeat` rounds of every variant would take many minutes."""
    for fn in fns.values():
        _warm_up(fn, warmup)
    samples: dict[str, list[float]] = {name: [] for name in fns}
    started, calls = time.perf_counter(), 0
    while calls < repeat or (time.perf_counter() - started < min_time_s and calls < 50 * repeat):
        if budget_s is not None and calls >= MIN_RUNS and time.perf_counter() - started > budget_s:
            break
        for name, fn in fns.items():
            if not samples[name] or min(samples[name]) < REWARM_BELOW_S:
                fn()  # re-warm after the other variants ran (their threads may still be spinning)
            for _ in range(block):
                t0 = time.perf_counter()
                fn()
                samples[name].append(time.perf_counter() - t0)
        calls += block
    return {name: Timing(statistics.median(s), min(s), max(s), len(s)) for name, s in samples.items()}


def _warm_up(fn, calls: int) -> None:
    started = time.perf_counter()
    for _ in range(calls):
        fn()
        if time.perf_counter() - started > WARMUP_BUDGET_S:
            return


def all_threads() -> int:
    return len(os.sched_getaffinity(0))


def llc_bytes() -> int:
    """Size of the last-level cache of CPU 0 (sysfs), 32 MiB if unreadable."""
    best = 0
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            level = int((index / "level").read_text())
            size = _parse_size((index / "size").read_text().strip())
        except (OSError, ValueError):
            continue
        best = size if level >= 3 or best == 0 else max(best, size)
    return best or 32 << 20


def _parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def host_info() -> dict:
    info = {"cpus_available": all_threads(), "llc_bytes": llc_bytes(),
            "memory_available_bytes": available_memory_bytes(),
            "loadavg_1m_at_start": os.getloadavg()[0],
            # torch's CPU allocator madvises huge pages for big buffers when this is 1: far fewer
            # first-touch page faults in the allocating variants
            "THP_MEM_ALLOC_ENABLE": os.environ.get("THP_MEM_ALLOC_ENABLE", "unset")}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return info


def available_memory_bytes() -> int:
    """MemAvailable (/proc/meminfo), capped by a cgroup v2 memory.max; 4 GiB if unreadable."""
    found = 4 << 30
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found = int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max":
            found = min(found, int(limit))
    except (OSError, ValueError):
        pass
    return found


# float32 arrays of the largest size alive at once, worst case: X, Y, a scratch buffer, two
# transient results of an allocating composed variant, and per ORT session of one size its arena
# (output + an intermediate) for up to 4 sessions; an op with a residual input and a second
# output holds R and H beside them and two outputs per session (AddRMSNorm at 16M elements:
# peak RSS 0.95 GiB above the interpreter's, about 15 arrays).
ARRAYS_ALIVE = 16
MEMORY_SHARE = 0.5  # of what is available: the machine is shared


def largest_fitting(memory: int) -> int:
    """The largest power-of-two element count whose arrays fit in MEMORY_SHARE of `memory`."""
    budget = int(memory * MEMORY_SHARE) // (4 * ARRAYS_ALIVE)
    return 1 << max(budget.bit_length() - 1, 12)


def sizes(*, quick: bool, llc: int, memory: int | None = None) -> list:
    """Element counts from cache-resident (16 KiB of input) to at least 4x the LLC of fp32
    input+output and at least the 16M elements the targets are stated at - but never more than
    the machine can hold (`memory`, default: available now)."""
    fits = largest_fitting(available_memory_bytes() if memory is None else memory)
    if quick:
        return [n for n in (1 << 12, 1 << 18, 1 << 24) if n <= fits] or [fits]
    top = min(fits, max(1 << 24, 1 << (max(4 * llc // 8, 2) - 1).bit_length()))
    out = [1 << e for e in range(12, top.bit_length(), 2)]
    return out if out[-1] == top else out + [top]
