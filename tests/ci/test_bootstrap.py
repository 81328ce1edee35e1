"""ci/bootstrap.py's tiny `tools:` reader (standard library only): it agrees with ci.matrix (on the
frozen golden/matrix.yaml here; on the live one in test_live_matrix.py), checks every pin before it
touches .nox/_bootstrap, and fails in one line."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ci import bootstrap
from ci import model as mx
from ci.model import values
from ci.provision import venvs

REPO = Path(__file__).resolve().parents[2]
REAL = (Path(__file__).resolve().parent / "golden" / "matrix.yaml").read_text()
NOX_LINE = REAL.splitlines().index('  nox: "2026.10.20"') + 1


def refusal(data: bytes) -> str:
    with pytest.raises(bootstrap.BootstrapError) as caught:
        bootstrap.read_requirements(data)
    message = str(caught.value)
    assert "\n" not in message and message.startswith("matrix.yaml: "), message
    return message


def edited(old: str, new: str) -> bytes:
    assert REAL.count(old) == 1, old
    return REAL.replace(old, new).encode()


def test_the_tiny_reader_agrees_with_the_real_reader(matrix):
    assert bootstrap.tool_pins(REAL) == dict(matrix.tools)
    assert bootstrap.read_requirements(REAL.encode()) == \
        venvs.tools_requirements(matrix, bootstrap.NEEDED)


def test_bootstrap_installs_what_the_real_reader_needs(matrix):
    """ci.matrix reads matrix.yaml with PyYAML, packaging and pydantic (ci/model/schema.py): the
    bootstrap venv where nox imports it gets their pins from tools:."""
    requirements = bootstrap.read_requirements(REAL.encode())
    for name in ("pyyaml", "packaging", "pydantic"):
        assert f"{name}=={matrix.tools[name]}" in requirements


def test_both_readers_have_the_same_size_limit():
    assert bootstrap.MAX_BYTES == mx.MAX_BYTES


@pytest.mark.parametrize("version", ["2026.10.20", "6.0.3", "0.19.3.0", "1.0rc1", "1.0.post2",
                                     "2.0a1.dev3", "0", "10.0b2"])
def test_what_bootstrap_accepts_the_real_reader_accepts(version):
    assert bootstrap.VERSION.fullmatch(version)
    assert str(values.parse_version(version, "tools.x")) == version


@pytest.mark.parametrize("version", ["01.2", "1.0-rc1", "v1", "1.0+local", "1!2.0", "1.2 ", "1.*",
                                     "1.0.0a", ""])
def test_bootstrap_refuses_what_it_cannot_prove_canonical(version):
    assert not bootstrap.VERSION.fullmatch(version)


@pytest.mark.parametrize("line, problem", [
    ('nox: "2026.10.20; touch x"',
     "tools.nox: expected a version such as \"2026.10.20\", got '2026.10.20; touch x'"),
    ('nox: "--index-url=http://evil.example/simple"', "tools.nox: expected a version"),
    ('nox: "2026.10.20 "', "tools.nox: expected a version"),
    ("nox: 2026.10.20", f"line {NOX_LINE}: expected `  name: \"version\"` in tools:, got '  nox: 2026.10.20'"),
    ('nox: "2026.10.20"\n  Nox: "2026.10.20"', "tools.Nox: pinned twice"),
    ('"nox": "2026.10.20"', f"line {NOX_LINE}: expected `  name: \"version\"` in tools:"),
    ('nox; rm -rf x: "2026.10.20"', f"line {NOX_LINE}: expected `  name: \"version\"` in tools:"),
])
def test_a_bad_tools_line_is_refused_in_one_line(line, problem):
    assert refusal(edited('nox: "2026.10.20"', line)).startswith(f"matrix.yaml: {problem}")


def test_a_missing_pin_is_named():
    assert refusal(edited('  nox: "2026.10.20"\n', "")) == (
        'matrix.yaml: tools: missing pin for nox (expected lines like `  nox: "2026.10.20"`)')


def test_undecodable_bytes_are_one_line():
    data = REAL.encode().replace(b"  pyyaml:", b"  pyyaml:\xff", 1)
    assert refusal(data) == (f"matrix.yaml: line {NOX_LINE + 1}, column 10: not UTF-8 text "
                             "(byte 0xff)")


def test_a_10_mb_file_is_refused_before_it_is_read_as_text():
    assert refusal(REAL.encode() + b"\xff" * (10 * 1024 * 1024)) == (
        "matrix.yaml: file: larger than the 256 KiB a matrix file may have")


# ---------------------------------------------------------------- the script, run for real


@pytest.fixture
def scratch_repo(tmp_path) -> Path:
    """A repo layout holding the real ci/bootstrap.py and noxfile.py and a .nox/_bootstrap that
    must survive."""
    (tmp_path / "ci").mkdir()
    shutil.copy(REPO / "ci" / "bootstrap.py", tmp_path / "ci" / "bootstrap.py")
    shutil.copy(REPO / "noxfile.py", tmp_path / "noxfile.py")   # the script block it reads
    keep = tmp_path / ".nox" / "_bootstrap"
    keep.mkdir(parents=True)
    (keep / "kept").write_text("the venv of an earlier run")
    return tmp_path


@pytest.mark.parametrize("data", [
    REAL.replace('nox: "2026.10.20"', 'nox: "2026.10.20; touch x"').encode(),
    REAL.replace('pyyaml: "6.0.3"', 'pyyaml: "--index-url=http://evil.example/simple"').encode(),
    REAL.encode() + b"\xff\n",
], ids=["marker", "option", "not-utf8"])
def test_bootstrap_refuses_before_it_touches_the_venv(scratch_repo, data):
    (scratch_repo / "matrix.yaml").write_bytes(data)
    done = subprocess.run([sys.executable, str(scratch_repo / "ci" / "bootstrap.py"), "-l"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith("matrix.yaml: ")
    assert (scratch_repo / ".nox" / "_bootstrap" / "kept").is_file()
    assert sorted(p.name for p in (scratch_repo / ".nox" / "_bootstrap").iterdir()) == ["kept"]
