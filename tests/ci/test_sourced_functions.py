"""Every opforge_* shell function that a generated workflow step or a docker/ script calls after
`source docker/<name>.sh` is defined there (a misnamed one fails only when the step runs:
`bash: opforge_podman: command not found` in every image push)."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from ci import model as mx
from ci.generate import workflows

GOLDEN = Path(__file__).resolve().parent / "golden"
DOCKER_SCRIPTS = sorted((REPO / "docker").glob("*.sh"))
# `source docker/podman.sh` in a step, `source "$(dirname ...)/podman.sh"` in a script
SOURCED = re.compile(r"""(?:^|[\s;&|('"])source\s+[^\n;&|]*?([\w-]+\.sh)\b""", re.MULTILINE)
LIBRARY_MARK = "# shellcheck shell=bash"   # the first line of a docker/*.sh meant to be sourced
# the start of a command: a line, or after && || ; | $( ( ` { and a quote opening a bash -c script
COMMAND_START = re.compile(r"&&|\|\||;|\||\$\(|\(|`|\{|\bthen\b|\bdo\b|\belse\b|^\s*'|\s'")
FUNCTION_DEFINITION = re.compile(r"^\s*([A-Za-z_]\w*)\s*\(\)\s*\{", re.MULTILINE)
PROJECT_FUNCTION = re.compile(r"^opforge_[a-z0-9_]+$")

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def defined_by(script: Path) -> set[str]:
    """The functions bash knows after sourcing the library (it defines, it runs nothing; a
    runnable script such as run.sh is never sourced here: it would build and run the image)."""
    assert script.read_text().startswith(LIBRARY_MARK), f"{script.name} is not a sourced library"
    done = subprocess.run(["bash", "-c", 'source "$1" && declare -F', "defined", str(script)],
                          cwd=REPO, check=True, capture_output=True, text=True)
    return {line.split()[-1] for line in done.stdout.splitlines()}


def commands(script: str) -> set[str]:
    """The first word of every simple command of a shell script (continuation lines joined)."""
    words = set()
    for line in script.replace("\\\n", " ").splitlines():
        for piece in COMMAND_START.split(line):
            first = piece.split(maxsplit=1)[0] if piece.split() else ""
            words.add(first.strip("'\")"))
    return words


def undefined_calls(script: str, own: set[str] = frozenset()) -> list[str]:
    """`name (sourced files)` for each opforge_* function the script calls that neither the
    docker/*.sh it sources nor the script itself defines."""
    sourced = sorted(set(SOURCED.findall(script)))
    if not sourced:
        return []
    known = set(own)
    for name in sourced:
        known |= defined_by(REPO / "docker" / name)
    called = {word for word in commands(script) if PROJECT_FUNCTION.match(word)}
    return [f"{name} ({', '.join(sourced)})" for name in sorted(called - known)]


def workflow_steps() -> list[tuple[str, str]]:
    """(file: job, run script) of every step of the workflows generated from the golden and the
    live matrix.yaml."""
    steps = []
    for matrix in (mx.load(GOLDEN / "matrix.yaml"), mx.load(mx.MATRIX)):
        for path, text in workflows.generated(matrix, "0123456789ab").items():
            if not path.startswith(".github/workflows/"):
                continue
            for job_name, job in yaml.safe_load(text)["jobs"].items():
                steps += [(f"{path}: {job_name}", step["run"]) for step in job.get("steps", [])
                          if "run" in step]
    return steps


def test_the_workflows_call_only_functions_their_sourced_script_defines():
    steps = workflow_steps()
    assert any("source docker/podman.sh" in run for _, run in steps), "no step sources podman.sh"
    problems = [f"{where}: {problem}" for where, run in steps for problem in undefined_calls(run)]
    assert not problems, problems


@pytest.mark.parametrize("script", DOCKER_SCRIPTS, ids=lambda path: path.name)
def test_the_docker_scripts_call_only_functions_defined_for_them(script):
    text = script.read_text()
    if script.name in ("build.sh", "run.sh"):
        assert SOURCED.findall(text) == ["podman.sh"], "the check reads what the script sources"
    assert not undefined_calls(text, set(FUNCTION_DEFINITION.findall(text)))


def test_the_sourced_scripts_name_their_functions_opforge_():
    """What the checks above look for: every function a docker/*.sh defines is opforge_*."""
    for script in DOCKER_SCRIPTS:
        if script.read_text().startswith(LIBRARY_MARK):
            assert all(PROJECT_FUNCTION.match(name) for name in defined_by(script)), script


def test_a_misnamed_function_is_found():
    step = "bash -c \\\n  'source docker/podman.sh && opforge_podman push \"$1\"' push x\n"
    assert undefined_calls(step) == ["opforge_podman (podman.sh)"]
    assert undefined_calls(step.replace("opforge_podman", "opforge_engine")) == []
