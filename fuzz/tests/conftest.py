"""The fuzz engine's tests import `fuzz` from the repository root. They build into build/fuzz,
a folder that pytest-xdist workers (and other runs) share: each build there holds a file lock."""
from __future__ import annotations

import contextlib
import fcntl
import sys
from pathlib import Path

import pytest

from opforge_spec.testing import run_once  # noqa: F401  (a fixture: builds shared by xdist workers)

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from support import PLANTED  # noqa: E402

from fuzz import runner  # noqa: E402


@contextlib.contextmanager
def locked(path: Path):
    """Holds an exclusive lock on `path` (created if needed) until the block ends."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield


@pytest.fixture(scope="session")
def engine_object():
    """The engine's object (build/fuzz/engine), built under a lock before the tests that link it:
    afterwards each build, in this process or a child, only reads it."""
    with locked(runner.BUILD / "engine.lock"):
        return runner.engine_object()


@pytest.fixture(scope="session")
def planted(engine_object):
    """planted(name) -> the fuzzer built from planted/<name>.cpp (kept in build/fuzz/selftest)."""
    def build(name: str) -> Path:
        out = runner.BUILD / "selftest" / name
        with locked(out.with_name(f"{name}.lock")):
            return runner.build_fuzzer(out, [PLANTED / f"{name}.cpp"])
    return build


