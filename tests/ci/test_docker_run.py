"""docker/run.sh: the engine command it runs (--dry-run builds and runs nothing): the GPU passed
in the way each engine takes it, the offline wheel folder, and clear refusals."""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUN = REPO / "docker" / "run.sh"

pytestmark = pytest.mark.skipif(not shutil.which("bash") or not shutil.which("sha256sum"),
                                reason="docker/run.sh needs bash and sha256sum")


def run_sh(*args: str, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OPFORGE_")}
    return subprocess.run(["bash", str(RUN), *args], capture_output=True, text=True,
                          env={**environment, **env}, timeout=60)


def engine_command(*args: str, **env: str) -> str:
    result = run_sh("--dry-run", *args, **env)
    assert result.returncode == 0, result.stderr
    return result.stderr.strip().splitlines()[-1]


def test_podman_gets_the_cdi_device():
    line = engine_command("--gpu", "tests")
    assert " podman " in line and " run --rm --network=none --device nvidia.com/gpu=all " in line
    assert line.endswith("nox --envdir /opt/opforge/nox -s tests")


def test_docker_gets_gpus_all_and_the_env_knob_works():
    line = engine_command("tests", OPFORGE_ENGINE="docker", OPFORGE_GPU="1")
    assert line.startswith("opforge: docker run --rm --network=none --gpus all ")


def test_the_dry_run_prints_what_podman_really_runs(tmp_path):
    """Pasted into a shell, the line runs what run.sh runs: the private store, vfs, runc and
    CONTAINERS_CONF (without them podman would look in the machine's own store)."""
    root = tmp_path / "my store"
    line = engine_command("--exec", "python", "-V", OPFORGE_PODMAN_ROOT=str(root))
    words = shlex.split(line.removeprefix("opforge: "))
    assert words[0] == f"CONTAINERS_CONF={REPO}/docker/containers.conf"
    assert words[1:7] == ["podman", "--root", f"{root}/root", "--runroot", f"{root}/run",
                          "--storage-driver=vfs"]
    assert words[7].startswith("--runtime=") and words[7].endswith("runc")
    assert words[8:11] == ["run", "--rm", "--network=none"] and words[-2:] == ["python", "-V"]


def test_without_wheels_it_says_the_container_is_offline_and_names_container_wheels():
    result = run_sh("--dry-run", "matrix", "--", "--only", "stage=unit-ort")
    assert result.returncode == 0, result.stderr
    note = result.stderr.splitlines()[0]
    assert note.startswith("opforge: no --wheels: the container runs with --network=none")
    assert note.endswith("python3 ci/bootstrap.py -s container_wheels -- PROFILE, then "
                         "docker/run.sh --wheels build/container-wheels matrix -- --only "
                         "stage=unit-ort")
    line = result.stderr.splitlines()[-1]
    assert "-e OPFORGE_NETWORK=none -e PIP_NO_INDEX=1 " in line   # pip fails at once, says why


def test_with_wheels_there_is_no_note(tmp_path):
    result = run_sh("--dry-run", "--wheels", str(tmp_path), "matrix")
    assert result.returncode == 0 and len(result.stderr.splitlines()) == 1, result.stderr


def test_no_gpu_unless_asked():
    line = engine_command("--exec", "python", "-V")
    assert "gpu" not in line and line.endswith(" python -V")


def test_the_wheel_folder_makes_pip_offline(tmp_path):
    line = engine_command("--wheels", str(tmp_path), "lint")
    assert f"-v {tmp_path}:/wheels:ro -e PIP_NO_INDEX=1 -e PIP_FIND_LINKS=/wheels" in line


def test_a_missing_wheel_folder_names_the_session(tmp_path):
    result = run_sh("--dry-run", "--wheels", str(tmp_path / "none"), "lint")
    assert result.returncode == 2
    assert ("not a folder (python3 ci/bootstrap.py -s container_wheels -- PROFILE makes "
            "build/container-wheels)") in result.stderr


def test_an_unknown_engine_is_refused():
    result = run_sh("--dry-run", "--gpu", "tests", OPFORGE_ENGINE="lxc")
    assert result.returncode == 2
    assert "OPFORGE_ENGINE=lxc: expected podman or docker" in result.stderr


def test_the_image_tag_follows_the_lock():
    tag = engine_command("tests").split(" localhost/opforge:")[1].split()[0]
    assert len(tag) == 12   # a hash of the Dockerfile, docker/apt.lock and the copied scripts
