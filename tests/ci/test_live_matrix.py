"""The ONE module of tests/ci that reads the live matrix.yaml: it is valid, what it generates is
committed and current, bootstrap's pin reader agrees with ci.matrix on it, and its toolkits work
on this machine. Every other test reads the frozen golden/matrix.yaml, so a version bump in
matrix.yaml changes no test outcome there; after a bump, only this module can fail."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ci import bootstrap
from ci import model as mx
from ci.provision import toolkits, venvs

REPO = Path(__file__).resolve().parents[2]
LIVE = REPO / "matrix.yaml"


@pytest.fixture(scope="module")
def live() -> mx.Matrix:
    return mx.load(LIVE)


def run_module(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, check=False,
                          capture_output=True, text=True, timeout=120)


def test_the_check_command_accepts_matrix_yaml():
    done = run_module("ci.matrix", "check")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("matrix.yaml: ok (")


def test_every_profile_and_the_suite_are_there(live):
    assert {"host", "ci-gpu", "full"} <= set(live.profiles)
    assert live.suite["ort"] in live.axes["ort"]


def test_committed_ci_files_are_current():
    done = run_module("ci.workflows", "--check")
    assert done.returncode == 0, done.stderr


def test_bootstrap_reads_the_same_pins_as_ci_matrix(live):
    text = LIVE.read_text()
    assert bootstrap.tool_pins(text) == dict(live.tools)
    assert bootstrap.read_requirements(text.encode()) == \
        venvs.tools_requirements(live, bootstrap.NEEDED)


def test_the_toolkits_are_read_through_ci_matrix(live):
    specs = toolkits.load()
    assert list(specs) == list(live.axes["toolkit"])
    assert {spec.source for spec in specs.values()} <= set(toolkits.SOURCES)


def _toolkit_params() -> list:
    """The system toolkit (skipped without nvcc) and any toolkit already provisioned here."""
    params = []
    for toolkit_id, spec in toolkits.load(LIVE).items():
        if spec.source == "system":
            found = toolkits.probe(spec)
            reason = f"no nvcc: {found.reason}"
            ready = found.available
        else:
            reason = (f"{toolkit_id} not provisioned on this machine "
                      f"(python -m ci.toolkits provision {toolkit_id})")
            ready = toolkits._stamp(spec) is not None
        marks = [] if ready else [pytest.mark.skip(reason=reason)]
        params.append(pytest.param(toolkit_id, marks=marks, id=toolkit_id))
    return params


@pytest.mark.parametrize("toolkit_id", _toolkit_params())
def test_toolkit_compiles_cub_to_sass(toolkit_id):
    """A real nvcc run: cub + <nv/target> to sm_80 SASS (cuobjdump), linked against libcudart."""
    spec = toolkits.spec_of(toolkit_id)
    toolkit = toolkits.provision(toolkit_id, spec)
    assert toolkits.nvcc_version(toolkit.nvcc) == spec.cuda
    assert (toolkit.root / "include" / "cuda_runtime.h").exists()
    assert (toolkit.root / "lib64" / "libcudart.so").exists()
    toolkits.verify(spec, toolkit.root)


def _lint(tool: str, args: list[str]) -> None:
    beside = Path(sys.executable).parent / tool     # a venv's bin/ that is not activated
    executable = str(beside) if beside.exists() else shutil.which(tool)
    if executable is None:
        pytest.skip(f"{tool} is not installed here (nox -s lint installs it from tools: in "
                    "matrix.yaml)")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run([executable, *args], cwd=REPO, check=False, capture_output=True,
                          text=True, env=env)
    assert done.returncode == 0, done.stdout + done.stderr


def test_actionlint_on_the_committed_workflows():
    # With shellcheck on PATH actionlint also checks every run: script. Files named: a checkout
    # without .git (an export, a scratch copy) has no project for a bare `actionlint`.
    workflows = sorted(str(p.relative_to(REPO)) for p in (REPO / ".github/workflows").glob("*.yml"))
    _lint("actionlint", ["-config-file", ".github/actionlint.yaml", *workflows])


def test_hadolint_on_the_committed_dockerfile():
    _lint("hadolint", ["--no-color", "docker/Dockerfile"])


def test_mypy_at_its_pin_on_the_packages_and_ci(live):
    """The type checker of mypy.ini (the packages' sources, opforge_spec, opforge_bench, ci/) at
    matrix.yaml's pin, against this venv's packages (their own types: numpy, torch, pydantic)."""
    beside = Path(sys.executable).parent / "mypy"
    executable = str(beside) if beside.exists() else shutil.which("mypy")
    if executable is None:
        pytest.skip("mypy is not installed here (suite-ci and nox -s lint install it from tools: "
                    "in matrix.yaml)")
    version = subprocess.run([executable, "--version"], check=True, capture_output=True,
                             text=True).stdout
    assert version.split()[:2] == ["mypy", live.tools["mypy"]], version
    done = subprocess.run([executable, "--python-executable", sys.executable], cwd=REPO,
                          check=False, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr


def test_gpu_cells_install_onnxruntime_gpu_and_the_host_does_not(live):
    """ci-gpu's ORT venvs run ONNX Runtime's CUDA EP: they install the onnxruntime-gpu build of
    their release; the host profile keeps the CPU onnxruntime."""
    gpu_cells, _ = mx.expand(live, "ci-gpu")
    assert live.profiles["ci-gpu"].gpu and gpu_cells
    for cell in gpu_cells:
        pins = venvs.requirements(live, cell, "ort")
        assert f"onnxruntime-gpu=={cell.values['ort']}" in pins
        assert not any(pin.startswith("onnxruntime==") for pin in pins)
    for cell in mx.expand(live, "host")[0]:
        assert f"onnxruntime=={cell.values['ort']}" in venvs.requirements(live, cell, "ort")


def test_the_gpu_check_finds_what_it_carries_in_matrix_yaml(live):
    from ci.gpucheck.prepare import carried_requirements

    pyproject = (REPO / "packages" / "ort_plugin" / "pyproject.toml").read_text()
    assert carried_requirements(live.tools, pyproject)[0] == \
        f"liger-kernel=={live.tools['liger-kernel']}"
