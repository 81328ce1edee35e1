"""Helpers of the fuzz engine's tests (conftest.py puts the repository root on sys.path)."""
from __future__ import annotations

import subprocess
from pathlib import Path

PLANTED = Path(__file__).resolve().parent / "planted"


def run(command: list, timeout: int = 180) -> subprocess.CompletedProcess:
    """Runs the engine; its output (stdout and stderr together) is in .stdout."""
    return subprocess.run([str(c) for c in command], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, errors="replace", timeout=timeout)


def tail(done: subprocess.CompletedProcess, lines: int = 40) -> str:
    return f"exit {done.returncode}; output ends:\n" + "\n".join(done.stdout.splitlines()[-lines:])
