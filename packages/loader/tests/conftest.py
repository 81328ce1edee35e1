import fcntl
import os
import pickle
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import opforge_loader  # noqa: E402
from plugin_build import build_sdk_plugin  # noqa: E402


@pytest.fixture
def plugin_dir(tmp_path: Path) -> Path:
    """A private (0755) plugin directory: pytest's tmp dirs are not world-writable."""
    d = tmp_path / "plugins"
    d.mkdir()
    os.chmod(d, 0o755)
    return d


@pytest.fixture(scope="session")
def sdk_plugins(tmp_path_factory):
    """{version: library} of the third-party plugin acme_offset, v1.0.0 (y = x + offset) and
    v1.1.0 (+100), each from a fresh `new-plugin` project built against the installed SDK."""
    root = tmp_path_factory.mktemp("acme")
    os.chmod(root, 0o755)
    return {v: build_sdk_plugin(root, v, extra) for v, extra in (("1.0.0", 0.0), ("1.1.0", 100.0))}


@pytest.fixture(scope="session")
def run_once(tmp_path_factory):
    """run_once(name, make) -> make(folder)'s result, made once per test run. Under pytest-xdist
    the first worker that asks makes it in a folder every worker of the run shares (pytest's base
    temp, one level above the worker's own); the others wait on a lock, then reuse the result."""
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base

    def once(name: str, make):
        with open(root / f"{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
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


@pytest.fixture
def log_lines():
    return []


@pytest.fixture
def registry(log_lines):
    reg = opforge_loader.Registry(log=lambda level, line: log_lines.append(line))
    yield reg
    reg.close()


def snapshot(reg):
    """What 'the registry is unchanged' compares: every op with its plugin, version and state."""
    return [(o.plugin, o.plugin_version, o.domain, o.name, o.version_major, o.state, o.library) for o in reg.ops()]
