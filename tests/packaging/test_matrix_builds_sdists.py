"""The matrix's build stages build each wheel from the package's sdist (ci/engine/executors.py),
so a cell proves what a user's `pip install` of that sdist does. Here with align (hatchling from
PyPI, seconds): the real Workspace and executor, only the ONNX Runtime headers named, not fetched."""
from __future__ import annotations

import re
import zipfile
from pathlib import Path

import pytest

from ci import model as mx
from ci.engine import executors

pytest.importorskip("build", reason="`python -m build` is not installed here (pip install build)")


class Workspace(executors.Workspace):
    def ort_include(self, matrix):
        return "/no-ort-headers-needed"


def build_align(tmp_path: Path, ws: Workspace) -> tuple[executors.Result, str]:
    matrix = mx.load()
    cell = mx.expand(matrix, "tests")[0][0]
    log = tmp_path / f"build-{len(list(tmp_path.glob('build-*.log')))}.log"
    job = executors.Job(matrix, cell, matrix.stages["build-align"], "key", "digest", {}, log,
                        tmp_path / "work")
    log.write_text("")
    return executors.build(job, ws), log.read_text()


def test_the_build_stage_builds_the_wheel_from_the_sdist_and_makes_it_once(tmp_path):
    ws = Workspace(tmp_path / "out", venv_root=tmp_path / "venvs")
    result, log = build_align(tmp_path, ws)
    assert result.status == "pass", log[-3000:]
    (sdist,) = (tmp_path / "out" / "sdists" / "align").glob("*/opforge_align-*.tar.gz")
    assert re.search(r"-m build --sdist --outdir \S+ \S+/packages/align\n", log), log[-2000:]
    wheel_commands = [line for line in log.splitlines() if " -m pip wheel " in line]
    assert wheel_commands and wheel_commands[-1].endswith(str(sdist)), wheel_commands
    (wheel,) = map(Path, result.outputs["wheels"])
    with zipfile.ZipFile(wheel) as archive:
        assert "opforge_align/__init__.py" in archive.namelist()

    again, log = build_align(tmp_path, Workspace(tmp_path / "out", venv_root=tmp_path / "venvs"))
    assert again.status == "pass", log[-3000:]
    assert "-m build --sdist" not in log, "the sdist of an unchanged package was made again"
