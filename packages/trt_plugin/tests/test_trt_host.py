"""The plugins driven through TensorRT's plugin interface by a C++ host (tests/trt_host.cc) compiled
against the same TensorRT headers: what TensorRT's builder and runtime call, minus TensorRT."""
from __future__ import annotations

import math
import subprocess

import numpy as np
import opforge_trt
import pytest

try:
    import opforge_spec
except ImportError:  # the spec-driven tests below skip; the host's own checks still run
    opforge_spec = None

CHECKS = ["creators", "roundtrip", "bad_fields", "formats", "shapes", "configure", "clone_attach", "enqueue",
          # field collections from outside (ONNX attributes, an engine's serialized state)
          "serialized_state", "field_structure", "float32_rule",
          "swiglu"]  # output shape d from the symbolic [..., 2d], odd last dim and rank 0 refused


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


def test_the_manifest_lists_the_creators_getcreators_returns(host):
    """The loader reads the manifest before dlopen: its ops are the library's V3 creators (plugin
    namespace = domain, plugin version = op version), one per op of the spec."""
    run = _run(host, "list")
    assert run.returncode == 0, run.stdout + run.stderr
    creators = [line.split()[1:] for line in run.stdout.splitlines() if line.startswith("creator ")]
    assert creators and all(c[0] == "V3ONE" for c in creators), creators
    registered = sorted((namespace, name, int(version)) for _, namespace, name, version in creators)
    listed = sorted((op["domain"], op["name"], op["version"]) for op in opforge_trt.manifest()["ops"])
    assert listed == registered, f"manifest {listed}, getCreators {registered}"
    assert sorted(name for _, name, _ in registered) == sorted(opforge_trt.OPS)


needs_spec = pytest.mark.skipif(opforge_spec is None, reason="pip install ./kernels (opforge_spec)")


def _attribute_bad_cases():
    if opforge_spec is None:
        return []
    return [pytest.param(op, case, id=f"{op.name}-{case.name}") for op in opforge_spec.OPS.values()
            for case in op.bad_cases() if case.attrs]


def _exact_in_float32(value: float) -> bool:
    if not math.isfinite(value):
        return True  # nan and inf exist in float32 too
    return opforge_spec.finite_in_float32(value) and float(np.float32(value)) == value


def _create(host, op_name, phase, *fields):
    run = _run(host, "create", op_name, phase, *fields)
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout


@needs_spec
@pytest.mark.parametrize("phase", ["build", "runtime"])
@pytest.mark.parametrize("op,case", _attribute_bad_cases())
def test_spec_attribute_bad_cases(host, op, case, phase):
    """Every bad attribute of the spec is refused in both phases with the spec's own message; as a
    float64 field the value is reported as itself (1e+300), as a float32 field as its float32."""
    (name, value), = case.attrs.items()
    encodings = [("f64", value)]
    if _exact_in_float32(value):
        encodings.append(("f32", value))
    for kind, v in encodings:
        out = _create(host, op.name, phase, f"{name}={kind}:{v!r}", "format_version=i32:1")
        assert "refused" in out, out
        assert op.attributes[name].error(op.name, v) in out, out
        for mention in case.mentions:
            assert mention in out, out


@needs_spec
@pytest.mark.parametrize("phase", ["build", "runtime"])
@pytest.mark.parametrize("op_name", ["Swish", "RMSNorm"])
def test_spec_attribute_defaults_and_good_values(host, op_name, phase):
    """A good value passes in both phases; an absent one is the spec's default at build time only."""
    op = opforge_spec.OPS[op_name]
    (name, attr), = op.attributes.items()
    out = _create(host, op_name, phase, f"{name}=f64:0.125", "format_version=i32:1")
    assert f"created {name}=0.125" in out, out
    absent = _run(host, "create", op_name, phase, "format_version=i32:1").stdout
    if phase == "build":  # an ONNX node without the attribute: the spec's default, as ONNX does
        assert f"created {name}={opforge_spec.format_number(float(np.float32(attr.default)))}" in absent, absent
    else:  # an engine's state without it is incomplete
        assert "refused" in absent and f"opforge.{op_name}: {name}: expected one serialized float32 field" in absent
