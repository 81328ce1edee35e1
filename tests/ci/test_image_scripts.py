"""The scripts docker/build.sh copies into the image (ci/generate/dockerfile.py IMAGE_INPUTS, the
same list as docker/podman.sh's OPFORGE_IMAGE_SCRIPTS) run there on their own: the apt lock
checker from the files the Dockerfile copies before its apt layer, the toolkit provisioner and the
Debian fetcher from the whole set."""
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ci.generate import dockerfile

REPO = Path(__file__).resolve().parents[2]


def copied(folder: Path, files) -> Path:
    for rel in files:
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / rel, folder / rel)
    return folder


def run(folder: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=folder, capture_output=True, text=True)


def test_the_shell_and_python_lists_of_image_scripts_are_one_list():
    script = (REPO / "docker" / "podman.sh").read_text()
    shell = re.search(r"OPFORGE_IMAGE_SCRIPTS=\(([^)]*)\)", script).group(1).split()
    assert ["docker/apt.lock", *shell] == list(dockerfile.IMAGE_INPUTS)


def test_the_apt_lock_checker_runs_from_what_precedes_the_apt_layer(tmp_path):
    template = (REPO / "docker" / "opforge.Dockerfile.in").read_text()
    apt_layer = template.index("RUN apt-get update")
    first = [src for line in template[:apt_layer].splitlines() if line.startswith("COPY ci/")
             for src in line.split()[1:-1]]
    assert first, "no ci/ scripts copied before the apt layer"
    done = run(copied(tmp_path, first), "ci/aptlock.py", "check", "--help")
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize("entry", [["ci/debian.py", "--help"], ["-m", "ci.toolkits", "--help"]])
def test_the_image_scripts_run_on_their_own(tmp_path, entry):
    inputs = [rel for rel in dockerfile.IMAGE_INPUTS if rel.startswith("ci/")]
    done = run(copied(tmp_path, inputs), *entry)
    assert done.returncode == 0, done.stderr[-2000:]
