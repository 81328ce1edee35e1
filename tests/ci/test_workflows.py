"""ci/generate/workflows.py: CI files generated from the frozen golden/matrix.yaml against their golden
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

from ci import model as mx
from ci.generate import dockerfile, workflows

GOLDEN = Path(__file__).resolve().parent / "golden"
FROZEN = GOLDEN / "matrix.yaml"
# generated file -> its golden copy (produced from golden/matrix.yaml)
GOLDEN_FILES = {".github/workflows/matrix.yml": "matrix.yml",
                ".github/workflows/release.yml": "release.yml",
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


# The golden workflows carry this image tag: the real one hashes ci/toolkits.py and ci/debian.py
# too (test_the_image_tag_is_the_one_docker_build_gives), which change more often than the goldens.
GOLDEN_TAG = "0123456789ab"


@pytest.mark.parametrize("path", GOLDEN_FILES)
def test_golden(golden_matrix, path):
    text = workflows.generated(golden_matrix, GOLDEN_TAG)[path]
    golden = GOLDEN / GOLDEN_FILES[path]
    if os.environ.get("OPFORGE_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text(), (
        f"{path} generated from tests/ci/golden/matrix.yaml differs from {golden.name}; if the "
        "change is intended: OPFORGE_UPDATE_GOLDEN=1 pytest tests/ci/test_workflows.py")


def test_jobs_are_the_cells_of_the_profile(golden_matrix):
    document = yaml.safe_load(workflows.workflow(golden_matrix, GOLDEN_TAG))
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
    from ci.engine import plan

    matrix = golden_matrix
    document = yaml.safe_load(workflows.workflow(matrix, GOLDEN_TAG))
    job = document["jobs"]["cell"]
    step = next(step for step in job["steps"] if step.get("name") == "Run the cell")
    assert step["run"] == 'nox -s matrix -- --profile ci-gpu --cell "$OPFORGE_CELL"\n'
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


def _tree(tmp_path: Path, matrix: mx.Matrix) -> Path:
    """The files --check compares, as --update writes them from the golden matrix."""
    tree = tmp_path / "tree"
    for path, text in workflows.generated(matrix).items():
        (tree / path).parent.mkdir(parents=True, exist_ok=True)
        (tree / path).write_text(text)
    return tree


def test_check_passes_on_current_files_and_detects_drift(tmp_path, golden_matrix):
    tree = _tree(tmp_path, golden_matrix)
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
    files = workflows.generated(golden_matrix, GOLDEN_TAG)
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
                         str(GOLDEN / "matrix.yml"), str(GOLDEN / "release.yml"),
                         str(GOLDEN / "wheels.yml")])


def test_hadolint_on_the_golden_dockerfile():
    _lint("hadolint", ["--no-color", str(GOLDEN / "Dockerfile")])


def test_shellcheck_on_the_container_scripts():
    _lint("shellcheck", ["-x", "docker/build.sh", "docker/run.sh", "docker/podman.sh"])


def test_a_hand_edit_of_the_release_workflow_is_caught(tmp_path, golden_matrix):
    tree = _tree(tmp_path, golden_matrix)
    release = tree / ".github/workflows/release.yml"
    release.write_text(release.read_text().replace("id-token: write", "id-token: none", 1))
    result = checked(tree, FROZEN)
    assert result.returncode == 1
    assert result.stderr.startswith("opforge: .github/workflows/release.yml: stale, differs from "
                                    "what matrix.yaml generates (first change: '-      id-token: "
                                    "none'); run python -m ci.workflows --update")


# ------------------------------------------------------------------------ actions, image, jobs


def _documents(matrix: mx.Matrix) -> dict[str, dict]:
    files = workflows.generated(matrix, GOLDEN_TAG)
    return {path: yaml.safe_load(text) for path, text in files.items()
            if path.startswith(".github/workflows/")}


def _steps(document: dict):
    for name, job in document["jobs"].items():
        for step in job.get("steps", []):
            yield name, step


def test_every_action_is_pinned_by_a_commit_of_the_table_with_its_release(golden_matrix):
    files = workflows.generated(golden_matrix, GOLDEN_TAG)
    pinned = {f"{repository}@{commit} # {release}"
              for repository, commit, release in workflows.ACTIONS.values()}
    for path, text in files.items():
        lines = [line.split("uses: ", 1)[1] for line in text.splitlines() if "uses: " in line]
        assert all(line in pinned for line in lines), (path, lines)
    used = {line.split("uses: ", 1)[1] for text in files.values() for line in text.splitlines()
            if "uses: " in line}
    assert used == pinned, "every action of the table is used (an unused pin goes stale unseen)"
    for repository, commit, release in workflows.ACTIONS.values():
        assert len(commit) == 40 and int(commit, 16) >= 0, repository
        assert release.startswith("v"), repository


def test_the_image_tag_is_the_one_docker_build_gives():
    """docker/podman.sh's opforge_image hashes the committed Dockerfile and the scripts
    docker/build.sh copies; the workflows name the image by the same hash."""
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    done = subprocess.run([bash, "-c", "source docker/podman.sh && opforge_image"], cwd=REPO,
                          check=True, capture_output=True, text=True)
    committed = (REPO / "docker" / "Dockerfile").read_text()
    assert done.stdout.strip() == f"localhost/opforge:{workflows.image_tag(committed)}"


def test_a_changed_image_input_changes_the_tag(tmp_path):
    for rel in dockerfile.IMAGE_INPUTS:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(f"# {rel}\n")
    before = workflows.image_tag("FROM x\n", tmp_path)
    assert before != workflows.image_tag("FROM y\n", tmp_path)
    (tmp_path / dockerfile.IMAGE_INPUTS[-1]).write_text("changed\n")
    assert before != workflows.image_tag("FROM x\n", tmp_path)
    assert len(before) == 12 and int(before, 16) >= 0


def test_gpu_cells_run_in_the_image_with_the_gpu(golden_matrix):
    jobs = _documents(golden_matrix)[".github/workflows/matrix.yml"]["jobs"]
    image, cell = jobs["image"], jobs["cell"]
    assert image["env"]["OPFORGE_IMAGE_TAG"] == GOLDEN_TAG
    assert image["permissions"]["packages"] == "write"
    # the registry and the GPU options are variables whose defaults are GitHub's (nox -s act sets
    # them: a registry on 127.0.0.1, no --gpus)
    assert image["env"]["OPFORGE_REGISTRY"] == "${{ vars.OPFORGE_REGISTRY || 'ghcr.io' }}"
    assert "$OPFORGE_REGISTRY/${GITHUB_REPOSITORY,,}/opforge:$OPFORGE_IMAGE_TAG" in image["steps"][1]["run"]
    assert 'docker login "$OPFORGE_REGISTRY"' in image["steps"][2]["run"]
    assert "ghcr.io" not in image["steps"][1]["run"] + image["steps"][2]["run"]
    assert cell["needs"] == "image"
    assert cell["container"]["image"] == "${{ needs.image.outputs.ref }}"
    assert cell["container"]["options"] == "${{ vars.OPFORGE_GPU_OPTIONS || '--gpus all' }}"
    assert cell["runs-on"] == list(golden_matrix.profiles["ci-gpu"].runs_on)


def test_cells_upload_what_the_gather_job_reads(golden_matrix):
    jobs = _documents(golden_matrix)[".github/workflows/matrix.yml"]["jobs"]
    upload = next(step for step in jobs["cell"]["steps"] if step.get("name") == "Upload the results")
    paths = upload["with"]["path"].split()
    assert paths == workflows.gathered_paths(golden_matrix)
    assert {"build/matrix/report.json", "build/matrix/work/align/", "build/matrix/work/abi/"} <= \
        set(paths)     # cross reads align's outputs, cross-torch abi's
    gather = jobs["gather"]
    assert gather["needs"] == "cell" and gather["if"] == "always()"
    download = gather["steps"][1]
    assert download["with"] == {"pattern": "results-*", "path": workflows.GATHERED}
    run = next(step["run"] for step in gather["steps"] if step.get("name") == "Gather")
    assert run.endswith(f"--profile ci-gpu --gather-from {workflows.GATHERED}\n")
    assert any("GITHUB_STEP_SUMMARY" in step.get("run", "") for step in gather["steps"])


def test_the_release_publishes_with_trusted_publishing_and_attests(golden_matrix):
    jobs = _documents(golden_matrix)[".github/workflows/release.yml"]["jobs"]
    document = yaml.safe_load(workflows.generated(golden_matrix, GOLDEN_TAG)[
        ".github/workflows/release.yml"])
    assert document[True] == {"push": {"tags": ["v*"]}}    # PyYAML reads `on` as true
    assert jobs["build"]["container"]["image"] == "${{ needs.image.outputs.ref }}"
    build_run = "".join(step.get("run", "") for step in jobs["build"]["steps"])
    assert f"nox -s {workflows.RELEASE_SESSION}\n" in build_run
    publish = jobs["publish"]
    assert publish["permissions"] == {"id-token": "write"}
    assert publish["environment"] == {"name": "pypi"}
    assert set(publish["needs"]) == {"smoke", "attest"}
    assert publish["steps"][-1]["uses"].startswith("pypa/gh-action-pypi-publish@")
    assert "password" not in publish["steps"][-1].get("with", {})
    attest = jobs["attest"]
    assert attest["permissions"]["attestations"] == "write"
    assert attest["permissions"]["id-token"] == "write"
    assert attest["steps"][-1]["uses"].startswith("actions/attest-build-provenance@")
    uploads = {step["with"]["name"]: step["with"]["path"] for step in jobs["build"]["steps"]
               if step.get("uses", "").startswith("actions/upload-artifact@")}
    assert uploads == {"dist": "build/release/dist/", "pypi": "build/release/pypi/",
                       "indexes": "build/release/index/"}


def test_only_plain_versions_go_to_pypi(golden_matrix, tmp_path):
    """The release job's selection step, run on files named as the release leaves them."""
    jobs = _documents(golden_matrix)[".github/workflows/release.yml"]["jobs"]
    select = next(step["run"] for step in jobs["build"]["steps"]
                  if step.get("name") == "Select what PyPI gets")
    dist = tmp_path / workflows.RELEASE_DIST
    dist.mkdir(parents=True)
    names = ["opforge_torch-0.1.0-py3-none-manylinux_2_28_x86_64.whl",
             "opforge_torch-0.1.0+cu130-py3-none-manylinux_2_28_x86_64.whl",
             "opforge_ort-0.1.0-py3-none-manylinux_2_28_x86_64.whl",
             "opforge_torch-0.1.0.tar.gz", "opforge_ort-0.1.0.tar.gz"]
    for name in names:
        (dist / name).write_bytes(b"x")
    subprocess.run(["bash", "-e", "-c", select], cwd=tmp_path, check=True, capture_output=True)
    assert sorted(p.name for p in (tmp_path / workflows.PYPI_DIR).iterdir()) == \
        sorted(name for name in names if "+" not in name)
