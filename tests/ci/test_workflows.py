"""ci/workflows.py: CI files generated from the frozen golden/matrix.yaml against their golden
copies, drift detection, and the linters on the golden files (the live matrix.yaml and the committed
files: test_live_matrix.py)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from ci import matrix as mx
from ci import workflows

GOLDEN = Path(__file__).resolve().parent / "golden"
FROZEN = GOLDEN / "matrix.yaml"
# generated file -> its golden copy (produced from golden/matrix.yaml)
GOLDEN_FILES = {".github/workflows/matrix.yml": "matrix.yml",
                ".github/workflows/wheels.yml": "wheels.yml",
                ".github/actionlint.yaml": "actionlint.yaml",
                "docker/Dockerfile": "Dockerfile"}


def _tool(name: str) -> str | None:
    """A linter on PATH or beside this Python (a venv's bin/ that is not activated)."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else shutil.which(name)


@pytest.fixture(scope="module")
def golden_matrix() -> mx.Matrix:
    return mx.load(FROZEN)


@pytest.mark.parametrize("path", GOLDEN_FILES)
def test_golden(golden_matrix, path):
    text = workflows.generated(golden_matrix)[path]
    golden = GOLDEN / GOLDEN_FILES[path]
    if os.environ.get("OPFORGE_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text(), (
        f"{path} generated from tests/ci/golden/matrix.yaml differs from {golden.name}; if the "
        "change is intended: OPFORGE_UPDATE_GOLDEN=1 pytest tests/ci/test_workflows.py")


def test_jobs_are_the_cells_of_the_profile(golden_matrix):
    document = yaml.safe_load(workflows.workflow(golden_matrix))
    job = document["jobs"]["cell"]
    include = job["strategy"]["matrix"]["include"]
    cells, excluded = mx.expand(golden_matrix, "ci-gpu")
    assert [{axis: str(entry[axis]) for axis in mx.AXES} for entry in include] == \
           [dict(cell.values) for cell in cells]
    assert excluded, "the golden matrix should exclude a combination (opset 21 with ORT 1.17.3)"
    assert not any(entry["opset"] == 21 and entry["ort"] == "1.17.3" for entry in include)
    assert job["runs-on"] == list(golden_matrix.profiles["ci-gpu"].runs_on)
    assert len({entry["id"] for entry in include}) == len(include)


def test_each_job_selects_exactly_its_cell(golden_matrix):
    """The job's --cell id, read the way nox -s matrix reads it, picks its one cell."""
    from ci import plan

    matrix = golden_matrix
    document = yaml.safe_load(workflows.workflow(matrix))
    job = document["jobs"]["cell"]
    step = next(step for step in job["steps"] if step.get("name") == "Run the cell")
    assert step["run"] == 'python3 ci/bootstrap.py -s matrix -- --profile ci-gpu --cell "$OPFORGE_CELL"\n'
    assert step["env"] == {"OPFORGE_CELL": "${{ matrix.id }}"}   # no expression inside run:
    cells, _ = mx.expand(matrix, "ci-gpu")
    for entry in job["strategy"]["matrix"]["include"]:
        chosen = plan.select(matrix, "ci-gpu", cell_id=entry["id"]).cells
        assert [c.id for c in chosen] == [" ".join(f"{a}={entry[a]}" for a in mx.AXES)]
    assert len({entry["id"] for entry in job["strategy"]["matrix"]["include"]}) == len(cells)


def checked(root: Path, matrix: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ci.workflows", "--check", "--matrix", str(matrix),
                           "--root", str(root)], cwd=REPO, check=False, capture_output=True,
                          text=True)


def test_check_passes_on_current_files_and_detects_drift(tmp_path):
    tree = tmp_path / "tree"
    for path, golden in GOLDEN_FILES.items():
        (tree / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(GOLDEN / golden, tree / path)
    assert checked(tree, FROZEN).returncode == 0
    data = yaml.safe_load(FROZEN.read_text())
    data["profiles"]["ci-gpu"]["opset"] = data["profiles"]["ci-gpu"]["opset"][:1]
    changed = tmp_path / "matrix.yaml"
    changed.write_text(yaml.safe_dump(data, sort_keys=False))
    (tmp_path / "docker").mkdir()     # the apt lock lives beside its matrix.yaml
    shutil.copy(GOLDEN / "docker" / "apt.lock", tmp_path / "docker" / "apt.lock")
    result = checked(tree, changed)
    assert result.returncode == 1
    first = result.stderr.splitlines()[0]
    assert first.startswith("opforge: .github/workflows/matrix.yml: stale, differs from what "
                            "matrix.yaml generates (first change: ")
    assert first.endswith("run python -m ci.workflows --update")


def test_missing_file_is_reported(tmp_path, golden_matrix):
    files = workflows.generated(golden_matrix)
    problems = workflows.stale(tmp_path, files)
    assert problems[0] == ("opforge: .github/workflows/matrix.yml: missing; run python -m "
                           "ci.workflows --update")


def test_dockerfile_pins_come_from_the_matrix(golden_matrix):
    text = workflows.dockerfile(golden_matrix)
    assert "FROM localhost/opforge-base:bookworm\n" in text
    assert "nox==2026.10.20 pyyaml==6.0.3" in text
    spec = golden_matrix.props("toolkit", "cuda-13.0-pypi")
    assert all(pin in text for pin in spec["packages"])
    assert "provision cuda-13.0-system" not in text   # the host's toolkit is mounted, not baked
    assert "--suite trixie libonnxruntime-dev 1.21.0+dfsg-1" in text
    assert "@" not in text.replace("--mount", "").split("FROM", 1)[1].replace("==", "")


def test_container_release_is_required(golden_matrix):
    data = {k: v for k, v in golden_matrix.data.items() if k != "container"}
    broken = mx.parse(data, GOLDEN / "matrix.yaml")
    with pytest.raises(workflows.GenerateError, match=r"matrix\.yaml: container\.debian: expected"):
        workflows.dockerfile(broken)


def _lint(tool: str, args: list[str]) -> None:
    executable = _tool(tool)
    if executable is None:
        pytest.skip(f"{tool} is not installed here (nox -s lint installs it from tools: in "
                    "matrix.yaml)")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run([executable, *args], cwd=REPO, check=False, capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stdout + result.stderr


def test_actionlint_on_the_golden_workflow():
    _lint("actionlint", ["-config-file", str(GOLDEN / "actionlint.yaml"),
                         str(GOLDEN / "matrix.yml"), str(GOLDEN / "wheels.yml")])


def test_hadolint_on_the_golden_dockerfile():
    _lint("hadolint", ["--no-color", str(GOLDEN / "Dockerfile")])


def test_shellcheck_on_the_container_scripts():
    _lint("shellcheck", ["-x", "docker/build.sh", "docker/run.sh", "docker/podman.sh"])
