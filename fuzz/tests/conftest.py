"""The fuzz engine's tests import `fuzz` from the repository root."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from support import PLANTED  # noqa: E402

from fuzz import runner  # noqa: E402


@pytest.fixture(scope="session")
def planted():
    """planted(name) -> the fuzzer built from planted/<name>.cpp (kept in build/fuzz/selftest)."""
    def build(name: str) -> Path:
        return runner.build_fuzzer(runner.BUILD / "selftest" / name, [PLANTED / f"{name}.cpp"])
    return build
