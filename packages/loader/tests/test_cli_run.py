"""`opforge-loader run` with an input or argument it cannot use: one line naming the file (or the
argument) and the problem, exit status 2; never a traceback or a hang, and pickled data is never
unpickled."""
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import opforge_loader

CLI = [sys.executable, "-m", "opforge_loader.cli"]


def write_object_npy(path: Path) -> None:
    np.save(path, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)


def write_pickle(path: Path) -> None:
    path.write_bytes(pickle.dumps([1.0, 2.0]))


def write_npz(path: Path) -> None:
    with open(path, "wb") as f:
        np.savez(f, x=np.ones(2, np.float32))


INPUTS = {
    # name: (how to make the --input file, what the line says)
    "object_npy": (write_object_npy, "pickled data is never loaded"),
    "pickle": (write_pickle, "pickled data is never loaded"),
    "npz": (write_npz, "is a .npz archive; expected one .npy file per --input"),
    "truncated": (lambda p: p.write_bytes(b"\x93NUMPY\x01\x00"), "could not be read"),
    "fifo": (os.mkfifo, "not a regular file; expected a .npy file"),
    "missing": (lambda p: None, "cannot open: No such file or directory"),
}


def run(*args) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, "run", "Scale", "--plugin-dir", opforge_loader.plugin_dir(), *map(str, args)],
                          capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("kind", sorted(INPUTS))
def test_unusable_input_is_one_line(tmp_path, kind):
    make, problem = INPUTS[kind]
    path = tmp_path / "x.npy"
    make(path)
    proc = run("--input", path, "--attr", "scale=2")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip() == proc.stderr.strip().splitlines()[0], proc.stderr
    assert proc.stderr.startswith(f"opforge-loader run: --input {path}: ") and problem in proc.stderr, proc.stderr


def test_attribute_without_value_is_a_usage_error(tmp_path):
    np.save(tmp_path / "x.npy", np.ones(2, np.float32))
    proc = run("--input", tmp_path / "x.npy", "--attr", "scale")
    assert proc.returncode == 2 and proc.stderr.strip() == "opforge-loader run: --attr: expected name=value, got 'scale'"


def test_unwritable_output_is_one_line(tmp_path):
    np.save(tmp_path / "x.npy", np.ones(2, np.float32))
    target = tmp_path / "missing" / "y.npy"
    proc = run("--input", tmp_path / "x.npy", "--attr", "scale=2", "--out", target)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == f"opforge-loader run: --out {target}: cannot write: No such file or directory"


def _multi_output_op():
    spec = pytest.importorskip("opforge_spec", reason="pip install ./kernels (the op spec) to run these")
    return next(op for op in spec.OPS.values() if len(op.outputs) > 1)


def _run_op(op, tmp_path, outs):
    case = op.cases("float32")[0]
    args = []
    for name, a in zip(op.inputs, case.inputs):
        np.save(tmp_path / f"{name}.npy", np.asarray(a, np.float32))
        args += ["--input", tmp_path / f"{name}.npy"]
    for out in outs:
        args += ["--out", tmp_path / out]
    proc = subprocess.run([*CLI, "run", op.name, "--plugin-dir", opforge_loader.plugin_dir(), *map(str, args)],
                          capture_output=True, text=True, timeout=60)
    return case, proc


def test_run_writes_every_output(tmp_path):
    """An op with several outputs (AddRMSNorm: Y, H): one --out per output, each file the output's
    values, each named on the summary line."""
    op = _multi_output_op()
    names = [f"{name}.out.npy" for name in op.outputs]
    case, proc = _run_op(op, tmp_path, names)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for i, name in enumerate(names):
        assert f"output {i}: float32" in proc.stdout and f"-> {tmp_path / name}" in proc.stdout, proc.stdout
    outputs = tuple(np.load(tmp_path / name) for name in names)
    op.check_close(outputs, op.reference(*case.inputs, **case.attrs), "float32", case.inputs, case.name)


def test_more_out_files_than_outputs_is_a_usage_error(tmp_path):
    op = _multi_output_op()
    names = [f"{i}.npy" for i in range(len(op.outputs) + 1)]
    _, proc = _run_op(op, tmp_path, names)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith(f"opforge-loader run: --out: expected at most {len(op.outputs)} "), proc.stderr
    assert not any((tmp_path / name).exists() for name in names)
