"""Test support shared by the project's test folders (import it in a conftest.py: it needs pytest).

`run_once(name, make)` -> make(folder)'s result, made once per test run. Under pytest-xdist the
first worker that asks makes it in a folder every worker of the run shares (pytest's base temp,
one level above the worker's own); the others wait on a lock, then reuse the result. With
`wait=False` a worker gets BUSY at once while another one is making it.
"""
from __future__ import annotations

import fcntl
import os
import pickle
import shutil

import pytest

BUSY = object()


@pytest.fixture(scope="session")
def run_once(tmp_path_factory):
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base

    def once(name: str, make, wait: bool = True):
        with open(root / f"{name}.lock", "w") as lock:
            try:  # the lock is released when the file closes
                fcntl.flock(lock, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return BUSY
            made = root / f"{name}.pickle"
            if made.is_file():
                return pickle.loads(made.read_bytes())
            folder = root / name
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            result = make(folder)
            made.write_bytes(pickle.dumps(result))
            return result
    return once
