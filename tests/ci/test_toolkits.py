"""ci/provision/toolkits.py: the toolkit data, its structured errors, the probe (the real compile check of
the live matrix's toolkits: test_live_matrix.py)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FROZEN = Path(__file__).resolve().parent / "golden" / "matrix.yaml"
sys.path.insert(0, str(REPO))

from ci import model as mx
from ci.provision import toolkits

SYSTEM = {"cuda": "13.0", "source": "system", "cuobjdump": "nvidia-cuda-cuobjdump==13.5.37"}
PYPI = {"cuda": "13.0", "source": "pypi",
        "packages": ["nvidia-cuda-nvcc==13.0.88", "nvidia-nvvm==13.0.88", "nvidia-cuda-crt==13.0.88",
                     "nvidia-cuda-runtime==13.0.96", "nvidia-cuda-cccl==13.0.85"]}
DEBIAN = {"cuda": "12.4", "source": "debian",
          "debian": {"suite": "trixie", "package": "nvidia-cuda-toolkit", "version": "12.4.131~12.4.1-2"},
          "packages": ["nvidia-cuda-runtime-cu12==12.4.127", "nvidia-cuda-cccl-cu12==12.4.127.post1",
                       "nvidia-cuda-nvcc-cu12==12.4.131"]}


def _fake_nvcc(folder: Path, release: str) -> Path:
    """A toolkit root whose nvcc only answers --version (for the probe's version logic)."""
    (folder / "bin").mkdir(parents=True)
    nvcc = folder / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\n"
                    f"[ \"$1\" = --version ] && echo 'Cuda compilation tools, release {release}, "
                    f"V{release}.1' && exit 0\n"
                    "echo 'fatal: this nvcc only knows its version' >&2; exit 1\n")
    nvcc.chmod(0o755)
    return folder


def test_the_three_kinds_parse():
    assert toolkits.parse_spec("a", SYSTEM).source == "system"
    assert toolkits.parse_spec("b", PYPI).packages == tuple(PYPI["packages"])
    assert toolkits.parse_spec("c", DEBIAN).debian["package"] == "nvidia-cuda-toolkit"


def test_toolkits_of_a_matrix_file_are_valid():
    specs = toolkits.load(FROZEN)
    assert {spec.source for spec in specs.values()} == {"system", "pypi", "debian"}


@pytest.mark.parametrize("change, key, expected", [
    ({"cudaa": "13.0"}, "cudaa", "one of the keys"),
    ({"cuda": 13.0}, "cuda", 'a quoted "MAJOR.MINOR" string'),
    ({"source": "conda"}, "source", "one of ['system', 'pypi', 'debian']"),
    ({"packages": ["nvidia-cuda-nvcc>=13.0"]}, "packages", "exact pins 'name==version'"),
    ({"packages": PYPI["packages"][:-1]}, "packages", "a pin of nvidia-cuda-cccl*"),
    ({"packages": PYPI["packages"][:4] + ["nvidia-cuda-cccl==13.1.4"]}, "packages",
     "versions of CUDA 13.0"),
    ({"debian": {"suite": "trixie"}}, "debian", "nothing for a pypi toolkit"),
    ({"cuobjdump": "cuobjdump"}, "cuobjdump", "a pin such as"),
])
def test_bad_spec_names_the_key(change, key, expected):
    with pytest.raises(toolkits.SpecError) as error:
        toolkits.parse_spec("cuda-13.0-pypi", {**PYPI, **change})
    assert error.value.where == f"toolkits.cuda-13.0-pypi.{key}"
    assert error.value.problem.startswith(f"expected {expected}")
    message = str(error.value)
    assert f"matrix.yaml: toolkits.cuda-13.0-pypi.{key}: expected {expected}" in message
    assert "\n" not in message


def test_the_matrix_reader_reports_the_fields_of_a_toolkit_error(raw):
    """A toolkit problem reads like every other matrix.yaml problem (built from the fields)."""
    broken = {**raw, "toolkits": {**raw["toolkits"], "t": {**PYPI, "source": "conda: x"}}}
    with pytest.raises(mx.MatrixError) as caught:
        mx.parse(broken)
    assert str(caught.value) == ("matrix.yaml: toolkits.t.source: expected one of ['system', "
                                 "'pypi', 'debian'], got 'conda: x'")


def test_bad_debian_spec():
    with pytest.raises(toolkits.ToolkitError, match=r"toolkits\.t\.debian\.version: expected a "
                                                    r"version of CUDA 12\.4"):
        toolkits.parse_spec("t", {**DEBIAN, "debian": {**DEBIAN["debian"], "version": "12.5.1-1"}})
    with pytest.raises(toolkits.ToolkitError, match=r"toolkits\.t\.packages: expected nothing"):
        toolkits.parse_spec("t", {**SYSTEM, "packages": PYPI["packages"]})


def test_broken_matrix_file_is_refused_by_the_one_reader(tmp_path):
    bad = tmp_path / "matrix.yaml"
    bad.write_text("toolkits: {a: [\n")
    with pytest.raises(mx.MatrixError) as error:
        toolkits.load(bad)
    assert str(error.value).startswith("matrix.yaml: line 2, column 1: YAML syntax error")
    assert "\n" not in str(error.value)


def test_the_reader_refuses_what_ci_matrix_refuses(tmp_path):
    """An anchor was fine for the old private safe_load; the one reader refuses it everywhere."""
    text = FROZEN.read_text().replace("cuda-13.0-system: {cuda", "cuda-13.0-system: &s {cuda", 1)
    bad = tmp_path / "matrix.yaml"
    bad.write_text(text)
    with pytest.raises(mx.MatrixError, match="YAML anchors and aliases"):
        toolkits.load(bad)
    done = subprocess.run([sys.executable, "-m", "ci.toolkits", "--matrix", str(bad), "list"],
                          cwd=REPO, check=False, capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.startswith("matrix.yaml: line ") and len(done.stderr.splitlines()) == 1


def test_cache_key_follows_the_pins():
    other = {**PYPI, "packages": PYPI["packages"][:4] + ["nvidia-cuda-cccl==13.0.86"]}
    assert toolkits.parse_spec("p", PYPI).key() != toolkits.parse_spec("p", other).key()


def test_probe_system_checks_the_version(tmp_path, monkeypatch):
    monkeypatch.setenv("OPFORGE_CACHE", str(tmp_path / "cache"))
    cuda = _fake_nvcc(tmp_path / "cuda", "12.1")
    monkeypatch.setenv("CUDA_HOME", str(_fake_nvcc(tmp_path / "wrapper", "13.0")))
    found = toolkits.probe(SYSTEM, "cuda-13.0-system")
    assert not found.available and "not a toolkit root" in found.reason
    (cuda / "include").mkdir()
    (cuda / "include" / "cuda_runtime.h").touch()
    monkeypatch.setenv("CUDA_HOME", str(cuda))
    found = toolkits.probe(SYSTEM, "cuda-13.0-system")
    assert not found.available and "is CUDA 12.1, the matrix wants 13.0" in found.reason
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "nowhere"))
    found = toolkits.probe(SYSTEM, "cuda-13.0-system")
    assert not found.available and "no nvcc at" in found.reason


def test_probe_downloads_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("OPFORGE_CACHE", str(tmp_path))
    found = toolkits.probe(PYPI, "cuda-13.0-pypi")
    assert found.available and not found.cached
    assert "will be downloaded" in found.reason
    assert list(tmp_path.iterdir()) == []


def test_probe_without_a_network_says_the_toolkit_cannot_be_had(tmp_path, monkeypatch):
    """In docker/run.sh's container (--network=none) an unprovisioned toolkit is not available."""
    monkeypatch.setenv("OPFORGE_CACHE", str(tmp_path))
    monkeypatch.setenv("OPFORGE_NETWORK", "none")
    found = toolkits.probe(PYPI, "cuda-13.0-pypi")
    assert not found.available and not found.cached
    assert "no network here to download it (docker/run.sh: --network=none)" in found.reason
    assert "will be downloaded" not in found.reason


def test_unknown_toolkit_cli_names_it():
    result = subprocess.run([sys.executable, "-m", "ci.toolkits", "--matrix", str(FROZEN), "probe",
                             "cuda-9.9-nowhere"], cwd=REPO, check=False, capture_output=True,
                            text=True)
    assert result.returncode == 2
    assert "toolkit 'cuda-9.9-nowhere' is not in matrix.yaml" in result.stderr


def test_broken_nvcc_fails_verification_naming_the_toolkit(tmp_path):
    root = _fake_nvcc(tmp_path / "cuda", "13.0")
    spec = toolkits.parse_spec("cuda-13.0-system", SYSTEM)
    with pytest.raises(toolkits.ToolkitError, match=r"toolkit cuda-13\.0-system: compiling a \.cu file"):
        toolkits.verify(spec, root)
