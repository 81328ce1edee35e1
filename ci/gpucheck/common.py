"""What every part of the GPU check shares: the repository, the budget's constants, progress lines,
the usage error. Standard library only, as every module the run imports (tests/ci/test_gpu_check_trust.py)."""
from __future__ import annotations

import re
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT_CARRIED = REPO / "build" / "gpu-carried"
DEFAULT_WORK = REPO / "build" / "gpu-check"
BUDGET_S = 480
REPORT_RESERVE_S = 15    # kept back from the parts for the report
MIN_PART_S = 20          # a part that would get less is skipped, not started
BENCH_MARGIN_S = 40      # the bench's own time limit is its timeout less this (its last shape)
LOG_TAIL_BYTES = 1 << 20  # of each part's log in OUT/check.log
NO_GPU = "no GPU"
NO_GPU_SKIP = re.compile(r"\bno GPU\b", re.IGNORECASE)
STARTED = time.monotonic()


class UsageError(Exception):
    """A folder or carried folder the check refuses: `gpu-check: <message>`, exit 2, nothing written."""


def progress(message: str) -> None:
    print(f"[gpu-check {time.monotonic() - STARTED:4.0f} s] {message}", flush=True)


def bench_report():
    """bench/opforge_bench/gpu_report.py (no torch; the op names come from kernels/opforge_spec,
    which needs numpy: ImportError where this python lacks it)."""
    for folder in (REPO / "kernels", REPO / "bench"):
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
    from opforge_bench import gpu_report  # noqa: PLC0415  (bench/ joins sys.path just above)

    return gpu_report
