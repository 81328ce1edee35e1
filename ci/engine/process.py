"""Run a stage's command into its log: its own process group (on a timeout the command and
everything it started end), and the CPU seconds it and its descendants used."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path


def wait_with_cpu(child: subprocess.Popen, timeout_s: float) -> tuple[int, float]:
    """(exit code, CPU seconds) of `child`: os.wait4 reports the child's user + system time with
    that of every descendant it waited for (compilers, pytest-xdist workers)."""
    deadline = time.monotonic() + timeout_s
    while True:
        pid, status, usage = os.wait4(child.pid, os.WNOHANG)
        if pid:
            child.returncode = os.waitstatus_to_exitcode(status)
            return child.returncode, usage.ru_utime + usage.ru_stime
        if time.monotonic() > deadline:
            raise subprocess.TimeoutExpired(child.args, timeout_s)
        time.sleep(0.05)


def run_logged(command: list[str], log: Path, *, env: Mapping[str, str] | None, cwd: Path,
               timeout_s: int) -> tuple[int, float]:
    """(exit code, CPU seconds) of `command`, its output appended to `log`; TimeoutError past
    `timeout_s` (the command's process group killed)."""
    with open(log, "a") as handle:
        handle.write(f"\n$ {' '.join(command)}\n")
        handle.flush()
        child = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, cwd=cwd,
                                 env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL,
                                 start_new_session=True)
        try:
            return wait_with_cpu(child, timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            handle.write(f"\nopforge matrix: timed out after {timeout_s} s: killed\n")
            raise TimeoutError(f"`{Path(command[0]).name} ...` ran past the stage timeout "
                               f"({timeout_s} s); see the log") from None
