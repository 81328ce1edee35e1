"""What a nox session prints besides its own output: nothing about uv, which no session uses."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BOOTSTRAP_PYTHON = REPO / ".nox" / "_bootstrap" / "bin" / "python"


def test_a_session_does_not_say_uv_is_missing():
    if not BOOTSTRAP_PYTHON.exists():
        pytest.skip("no .nox/_bootstrap (python3 ci/bootstrap.py makes it)")
    done = subprocess.run([str(BOOTSTRAP_PYTHON), "-m", "nox", "-s", "matrix", "--", "--list"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert "Running session matrix" in done.stderr, done.stderr[-2000:]
    assert "uv binary not found" not in done.stdout + done.stderr
