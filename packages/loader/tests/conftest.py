import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import opforge_loader  # noqa: E402
from plugin_build import nlohmann_json_include_dir  # noqa: E402

# Tests that compile the host sources themselves (test_stress.py, the fuzz target) need the
# headers of nlohmann-json (the `test` extra); gcc reads extra include directories from CPATH.
_json_include = nlohmann_json_include_dir()
if _json_include:
    os.environ["CPATH"] = os.pathsep.join(filter(None, [_json_include, os.environ.get("CPATH")]))


@pytest.fixture
def plugin_dir(tmp_path: Path) -> Path:
    """A private (0755) plugin directory: pytest's tmp dirs are not world-writable."""
    d = tmp_path / "plugins"
    d.mkdir()
    os.chmod(d, 0o755)
    return d


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
