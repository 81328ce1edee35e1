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


def test_pip_in_the_offline_container_names_the_wheel_folder(tmp_path, monkeypatch):
    """What docker/run.sh sets without --wheels: a real pip fails, the error says why and what to
    run (pip's own words were `No matching distribution found`)."""
    monkeypatch.setenv("OPFORGE_NETWORK", "none")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--dest", str(tmp_path),
           venvs.pin("build", MATRIX.tools["build"])]
    with pytest.raises(RuntimeError) as failed:
        venvs._check(pip, lambda line: None)   # what venvs.ensure runs pip install with
    assert str(failed.value).startswith(
        "no network here (docker/run.sh runs the container with --network=none) and no wheel "
        "folder: python3 ci/bootstrap.py -s container_wheels -- PROFILE on the host")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    assert venvs.offline_hint().startswith("no network here and the wheel folder lacks a pin")
    monkeypatch.delenv("OPFORGE_NETWORK")
    assert venvs.offline_hint() == ""


def _wheel(folder: Path, name: str, version: str) -> Path:
    """A minimal pure-Python wheel, as pip reads one."""
    import zipfile

    path = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        wheel.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: "
                                        "true\nTag: py3-none-any\n")
        wheel.writestr(f"{info}/RECORD", "")
    return path


def test_the_download_says_what_it_fetches_and_how_much(tmp_path, monkeypatch, capfd):
    """container_wheels fetches GBs: a line per pin set, then the folder's size (pip -q said
    nothing for minutes)."""
    source = tmp_path / "index"
    source.mkdir()
    _wheel(source, "opforge_demo", "1.0")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(source))
    dest = tmp_path / "wheels"
    container.download([["opforge-demo==1.0"]], dest, container.pip_target("3.11", "2.36", "x86_64"))
    out = capfd.readouterr().out
    assert "opforge: container wheels 1/1: opforge-demo==1.0\n" in out
    assert f"opforge: container wheels 1/1 done: 1 files, 0.00 GB in {dest} after " in out
    assert (dest / "opforge_demo-1.0-py3-none-any.whl").is_file()
