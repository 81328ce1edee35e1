"""What every alignment script does at the end: write the reports, the stage result, print the
failures with their worst element, and exit non-zero when a check failed."""
from __future__ import annotations

import sys
from pathlib import Path

from .checks import Results, write_stage_result


def finish(results: Results, *, out: Path, name: str, title: str, extra_artifacts=(),
           extra_numbers=None) -> int:
    artifacts = results.write(out, name, title) + [str(a) for a in extra_artifacts]
    write_stage_result({**results.numbers(), **(extra_numbers or {})}, artifacts)
    results.print_failures()
    runs = len([c for c in results.checks if not c.skipped])
    print(f"{title}: {runs} checks, {len(results.failed)} failed, {len(results.known)} known "
          f"deviations, {len(results.checks) - runs} skipped; report {out / (name + '.md')}")
    return 1 if results.failed else 0


def fault_arg(parser) -> None:
    parser.add_argument("--inject-fault", choices=("none", "ulp", "sign"), default="none",
                        help="self-test of the harness: corrupt the opforge outputs (1 ulp too "
                             "large, or sign flipped); the run must then fail")


def exit_with(code: int) -> None:
    sys.stdout.flush()
    sys.exit(code)
