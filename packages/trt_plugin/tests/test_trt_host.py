"""The plugins driven through TensorRT's plugin interface by a C++ host (tests/trt_host.cc) compiled
against the same TensorRT headers: what TensorRT's builder and runtime call, minus TensorRT."""
from __future__ import annotations

import subprocess

import opforge_trt
import pytest

CHECKS = ["creators", "roundtrip", "bad_fields", "formats", "shapes", "configure", "clone_attach", "enqueue"]


def _run(host, check, *extra):
    return subprocess.run([str(host), opforge_trt.library_path(), check, *extra], capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize("check", CHECKS)
def test_host_check(host, check):
    run = _run(host, check)
    assert run.returncode == 0, run.stdout + run.stderr  # a crash is a negative status
    assert "FAIL" not in run.stdout
    assert run.stdout.count("ok ") >= 3, run.stdout  # the checks really ran


def test_messages_go_to_stderr_without_a_logger_finder(host):
    """Loaded without setLoggerFinder (a host that never calls it), errors are still said."""
    run = _run(host, "configure", "--no-logger")
    # the host's own expectations about captured log lines fail; the plugin's words are on stderr
    assert "opforge.RMSNorm: W: expected 1-D tensor of length 64 (last dim of X), got shape [32]" in run.stderr
    assert run.returncode in (0, 1), run.returncode  # never a crash


def test_the_host_detects_a_wrong_library(host, tmp_path):
    """The host itself can fail: a library whose creators' names differ is caught."""
    data = open(opforge_trt.library_path(), "rb").read()
    assert data.count(b"RMSNorm\0") >= 1
    broken = tmp_path / "libbroken.so.1"
    broken.write_bytes(data.replace(b"RMSNorm\0", b"RMSNorn\0"))
    run = subprocess.run([str(host), str(broken), "creators"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 1 and "FAIL creator RMSNorm registered" in run.stdout, run.stdout
