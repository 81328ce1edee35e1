"""ci/provision/container.py's wheel folder holds every tool the stage engine installs for a
profile: a container run is offline (--network=none), and a pin missing from the folder fails the
stage at pip install (`No matching distribution found for build==...`)."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from ci import model as mx
from ci.provision import container, venvs

MATRIX = mx.load()
# the code that installs for a stage: its tool names must come from the stage or KIND_TOOLS
ENGINE = sorted([*(REPO / "ci" / "engine").glob("*.py"), *(REPO / "ci" / "artifacts").glob("*.py")])


def downloaded(profile: str) -> set[str]:
    return {pin for pins in container.requirement_sets(MATRIX, profile) for pin in pins}


def profile_stages(profile: str) -> list[mx.Stage]:
    names = MATRIX.profiles[profile].stages or tuple(MATRIX.stages)
    return [MATRIX.stages[name] for name in names]


@pytest.mark.parametrize("profile", list(MATRIX.profiles))
def test_every_profile_holds_the_sdist_tool_of_its_build_stages(profile):
    """The `build` tool makes every package's sdist; only `tests` had it, by its own tools:."""
    if any(stage.kind == "build" for stage in profile_stages(profile)):
        assert venvs.pin("build", MATRIX.tools["build"]) in downloaded(profile)


@pytest.mark.parametrize("profile", list(MATRIX.profiles))
def test_every_profile_holds_every_tool_its_stages_install(profile):
    wanted = {pin for stage in profile_stages(profile)
              for pins in venvs.stage_tool_sets(MATRIX, stage) for pin in pins}
    assert wanted - downloaded(profile) == set()


def _tool_arguments(path: Path):
    """(line, source of the names argument) of every tools_requirements(matrix, names) call."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) \
                == "tools_requirements":
            yield node.lineno, ast.unparse(node.args[1])


def test_the_engine_installs_tools_only_from_the_stage_or_its_kind():
    """A literal list of tool names in the engine is an install requirement_sets cannot see: name
    the tool in the stage's `tools:` or in venvs.KIND_TOOLS instead."""
    literal = [f"{path.relative_to(REPO)}:{line}: {names}" for path in ENGINE
               for line, names in _tool_arguments(path) if names.split(".")[-1] != "tools"]
    assert literal == []
