import os
import sys
from pathlib import Path

import pytest

from opforge_spec.testing import run_once  # noqa: F401  (a fixture: builds shared by xdist workers)

sys.path.insert(0, str(Path(__file__).resolve().parent))

from plugin_build import build_sdk_plugin

import opforge_loader


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
