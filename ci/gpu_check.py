"""The GPU check: one command for a bare GPU machine (no network, a CUDA torch preinstalled).

    python3 ci/gpu_check.py OUT [--carried DIR] [--budget 480] [--work DIR]
    python3 ci/gpu_check.py --dry-run             # the plan: what runs, what is skipped and why
    python3 ci/gpu_check.py --prepare DIR         # where there is a network: what to bring along

It builds opforge_torch and the ONNX Runtime plugin with CUDA for the local GPU's SM only (into a
private folder; the machine's torch is used), runs the GPU tests (packages/torch_ext/tests with
OPFORGE_REQUIRE_GPU=1, kernels/tests, the ORT plugin's CUDA tests where ONNX Runtime has its CUDA
EP), runs the spec's small CUDA cases once more under `compute-sanitizer --tool memcheck`, runs
the GPU bench's quick set, and writes OUT/report.md and OUT/report.json (the bench's files in
OUT/bench/, every part's log in OUT/check.log: 6 files). Every part it cannot run says
`skipped: <reason>`; it exits 1 only when a part failed, and stays within --budget seconds.

It writes only into folders it makes its own (marked with .opforge-gpu-check): OUT, --work and
--prepare's DIR are refused (one line, exit 2) where they are a file, hold the repository or hold
files it did not write, and it only ever replaces what it wrote there. --prepare records the
sha256 of every file it carries (DIR/carried.json); the run refuses a carried folder holding
anything unlisted, missing or changed.

The plan and the report are functions of a Probe (what this machine has): tests/ci/test_gpu_check.py
drives them with probes it makes up, and the real probe on the machine it runs on. Standard
library only: it runs under whatever python3 holds the machine's torch (--prepare alone reads
matrix.yaml, with pydantic; tests/ci/test_gpu_check_trust.py runs the check in a venv holding
torch and nothing else).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

if not __package__:   # run by path (python3 ci/gpu_check.py): the repository is not on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ci.gpucheck.common import (  # noqa: F401
    BUDGET_S,
    DEFAULT_CARRIED,
    DEFAULT_WORK,
    LOG_TAIL_BYTES,
    REPO,
    REPORT_RESERVE_S,
    UsageError,
)
from ci.gpucheck.execute import Result, execute, judge, run_part  # noqa: F401
from ci.gpucheck.folders import apart, check_writable
from ci.gpucheck.plan import Layout, Part, plan, render_plan  # noqa: F401
from ci.gpucheck.probe import Probe, probe  # noqa: F401
from ci.gpucheck.report import (  # noqa: F401
    bench_targets,
    check,
    overall,
    target_table,
    write_log,
    write_report,
)

# ----------------------------------------------------------------------------------------- main

def parse(argv):
    parser = argparse.ArgumentParser(prog="python3 ci/gpu_check.py", description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, help="the folder for report.md, report.json, ...")
    parser.add_argument("--carried", type=Path, default=DEFAULT_CARRIED,
                        help="what --prepare gathered (default build/gpu-carried)")
    parser.add_argument("--work", type=Path, default=DEFAULT_WORK,
                        help="builds and logs (default build/gpu-check; emptied first)")
    parser.add_argument("--budget", type=float, default=BUDGET_S, metavar="SECONDS")
    parser.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    parser.add_argument("--prepare", type=Path, metavar="DIR",
                        help="download what a GPU machine without network needs into DIR")
    args = parser.parse_args(argv)
    if not (args.out or args.dry_run or args.prepare):
        parser.error("give OUT, --dry-run or --prepare DIR")
    return args


def check_layout(layout: Layout, *, out_given: bool) -> None:
    """Refuse (UsageError) folders the run may not write, or that overlap; writes nothing."""
    check_writable(layout.work, "--work")
    if layout.carried.is_relative_to(layout.work):
        raise UsageError(f"--work {layout.work} is emptied first: it must not hold --carried "
                         f"{layout.carried}")
    if not out_given:
        return
    check_writable(layout.out, "OUT")
    if not apart(layout.out, layout.work):
        raise UsageError(f"--work {layout.work} is emptied first and OUT's bench/ replaced: OUT "
                         f"{layout.out} and --work must not hold one another")
    if not apart(layout.out, layout.carried):
        raise UsageError(f"OUT {layout.out} and --carried {layout.carried} must not hold one another")


def run(args) -> int:
    if args.prepare:
        # --prepare alone reads matrix.yaml (ci.model, pydantic): the run needs the standard
        # library and torch only
        from ci.gpucheck.prepare import prepare  # noqa: PLC0415

        return prepare(args.prepare.resolve())
    layout = Layout(out=args.out.resolve() if args.out else Path("OUT"), work=args.work.resolve(),
                    carried=args.carried.resolve())
    check_layout(layout, out_given=bool(args.out))
    if args.dry_run:
        p = probe(layout.carried)
        print(render_plan(p, plan(p, layout)))
        return 0
    return check(layout, budget_s=args.budget)


def main(argv=None) -> int:
    args = parse(argv)
    try:
        return run(args)
    except UsageError as err:
        print(f"gpu-check: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
