"""`python -m opforge_ort doctor`: each diagnosis produced from a really broken input."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from ort_models import MIN_ORT, ORT_VERSION, make_model, opforge_node, single_op_model, value_info

import opforge_ort
from opforge_ort import doctor


def _write(tmp_path: Path, name: str, model: bytes) -> str:
    path = tmp_path / f"{name}.onnx"
    path.write_bytes(model)
    return str(path)


def _swish_model(tmp_path, dtype="float32", op="Swish", domain="opforge", opforge_version=1) -> str:
    node = helper.make_node(op, ["X"], ["Y"], domain=domain, name="n0")
    model = make_model([node], [value_info("X", dtype, 2)], [value_info("Y", dtype, None)],
                       opforge_version=opforge_version, domain=domain)
    return _write(tmp_path, f"{op}_{dtype}_{domain}_{opforge_version}", model)


def _codes(model: str, **kw) -> list:
    return doctor.diagnose(model, **kw).codes()


def test_healthy_model(tmp_path):
    model = _write(tmp_path, "good", single_op_model("RMSNorm", "float32", 3))
    report = doctor.diagnose(model)
    assert report.codes() == []
    assert ("run", "one run with synthetic inputs (ones; symbolic dims = 2) succeeded") in report.checked


def test_cli_exit_status_and_output(tmp_path):
    good = _write(tmp_path, "good", single_op_model("Swish", "float32", 2))
    ok = subprocess.run([sys.executable, "-m", "opforge_ort", "doctor", good], capture_output=True, text=True)
    assert ok.returncode == 0 and "result: loads and runs" in ok.stdout, ok.stdout + ok.stderr
    bad = _swish_model(tmp_path, op="Gelu")
    fail = subprocess.run([sys.executable, "-m", "opforge_ort", "doctor", bad], capture_output=True, text=True)
    assert fail.returncode == 1 and "[op-not-in-domain]" in fail.stdout and "fix:" in fail.stdout, fail.stdout


def test_library_not_found(tmp_path):
    model = _swish_model(tmp_path)
    assert _codes(model, library=str(tmp_path / "libopforge_ort.so.1")) == ["library-not-found"]


def test_entry_symbol_missing(tmp_path):
    """A copy of the real library whose dynamic symbol is renamed in .dynstr: dlopen works,
    dlsym("RegisterCustomOps") does not, exactly like a library built without the export."""
    data = Path(opforge_ort.library_path()).read_bytes()
    assert data.count(b"RegisterCustomOps\0") >= 1
    broken = tmp_path / "libbroken.so.1"
    broken.write_bytes(data.replace(b"RegisterCustomOps\0", b"RegisterCustomOpz\0"))
    report = doctor.diagnose(_swish_model(tmp_path), library=str(broken))
    assert report.codes() == ["entry-symbol-missing"]
    options = ort.SessionOptions()
    with pytest.raises(Exception, match="RegisterCustomOps"):  # what ORT itself says about it
        options.register_custom_ops_library(str(broken))


def test_dependency_missing(tmp_path):
    """A copy of the real library whose NEEDED entry names a library that does not exist (as a CUDA
    build on a machine without libcudart): the loader error is reported with the missing name."""
    data = Path(opforge_ort.library_path()).read_bytes()
    broken = tmp_path / "libopforge_ort.so.1"
    broken.write_bytes(data.replace(b"libm.so.6\0", b"libq.so.6\0"))
    report = doctor.diagnose(_swish_model(tmp_path), library=str(broken))
    assert report.codes() == ["dependency-missing"]
    assert "libq.so.6" in report.problems[0].message


def test_not_a_library(tmp_path):
    fake = tmp_path / "libopforge_ort.so.1"
    fake.write_text("not an ELF file")
    assert _codes(_swish_model(tmp_path), library=str(fake)) == ["library-not-loadable"]


def test_manifest_mismatch(tmp_path):
    lib = tmp_path / "libopforge_ort.so.1"
    shutil.copy(opforge_ort.library_path(), lib)
    manifest = Path(opforge_ort.manifest_path()).read_text()
    (tmp_path / "libopforge_ort.so.1.manifest.json").write_text(manifest.replace('"sha256": "', '"sha256": "00'))
    assert _codes(_swish_model(tmp_path), library=str(lib)) == ["manifest-mismatch"]


def test_domain_version_mismatch(tmp_path):
    report = doctor.diagnose(_swish_model(tmp_path, opforge_version=2))
    assert report.codes() == ["domain-version-mismatch"]
    assert "imports opforge version 2" in report.problems[0].message


def test_domain_not_imported(tmp_path):
    report = doctor.diagnose(_swish_model(tmp_path, opforge_version=None))
    assert report.codes() == ["domain-version-mismatch"]
    assert "no opset_import for domain 'opforge'" in report.problems[0].message


def test_domain_spelled_differently(tmp_path):
    report = doctor.diagnose(_swish_model(tmp_path, domain="OpForge"))
    assert report.codes() == ["domain-mismatch"]
    assert "is not a registered function/op" in report.problems[0].evidence  # ORT's own words


def test_op_not_in_domain(tmp_path):
    report = doctor.diagnose(_swish_model(tmp_path, op="Gelu"))
    assert report.codes() == ["op-not-in-domain"]
    assert "opforge::Gelu" in report.problems[0].message


def test_op_name_case_hint(tmp_path):
    report = doctor.diagnose(_swish_model(tmp_path, op="swish"))
    assert report.codes() == ["op-not-in-domain"] and "'Swish'" in report.problems[0].fix


@pytest.mark.parametrize("dtype", ["int32", "float16"])
def test_type_not_supported(tmp_path, dtype):
    report = doctor.diagnose(_swish_model(tmp_path, dtype=dtype))
    assert report.codes() == ["type-not-supported"]
    assert f"X is {dtype}" in report.problems[0].message
    if dtype == "int32":  # the kernel's own canonical error, from a real run
        assert "opforge.Swish: X: expected float32, float64 or bfloat16 tensor, got int32" in report.problems[0].evidence


def test_weight_type_differs(tmp_path):
    node = opforge_node("RMSNorm", ["X", "W"], ["Y"], name="r")
    model = make_model([node], [value_info("X", "float32", 2), value_info("W", "float64", 1)],
                       [value_info("Y", "float32", None)])
    assert _codes(_write(tmp_path, "w64", model)) == ["type-not-supported"]


def test_healthy_model_of_every_op(tmp_path):
    import opforge_spec as spec

    for name in spec.OPS:
        report = doctor.diagnose(_write(tmp_path, name, single_op_model(name, "float32", 2)))
        assert report.codes() == [], (name, report.problems)


def test_residual_type_differs(tmp_path):
    node = opforge_node("AddRMSNorm", ["X", "R", "W"], ["Y", "H"], name="a")
    model = make_model([node], [value_info("X", "float32", 2), value_info("R", "float64", 2), value_info("W", "float32", 1)],
                       [value_info("Y", "float32", None), value_info("H", "float32", None)])
    report = doctor.diagnose(_write(tmp_path, "r64", model))
    assert report.codes() == ["type-not-supported"]
    assert "input 1 ('R') is double, X is float" in report.problems[0].message
    assert "opforge.AddRMSNorm: R: expected float32 tensor (same dtype as X), got float64" in report.problems[0].evidence


def test_residual_shape_differs(tmp_path):
    fixed = {"X": [2, 4], "R": [2, 3], "W": [4]}
    node = opforge_node("AddRMSNorm", list(fixed), ["Y", "H"], name="a")
    model = make_model([node], [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in fixed.items()],
                       [value_info("Y", "float32", None), value_info("H", "float32", None)])
    report = doctor.diagnose(_write(tmp_path, "r_shape", model))
    assert report.codes() == ["bad-input"]
    assert ("opforge.AddRMSNorm: R: expected a tensor of shape [2, 4] (the shape of X), got shape [2, 3]"
            in report.problems[0].message)


def test_bad_attribute(tmp_path):
    node = opforge_node("RMSNorm", ["X", "W"], ["Y"], name="r", epsilon=-1.0)
    model = make_model([node], [value_info("X", "float32", 2), value_info("W", "float32", 1)],
                       [value_info("Y", "float32", None)])
    report = doctor.diagnose(_write(tmp_path, "eps", model))
    assert report.codes() == ["bad-attribute"]
    assert "opforge.RMSNorm: epsilon: expected a finite float32 >= 0, got -1" in report.problems[0].message


@pytest.mark.old_runtime
@pytest.mark.skipif(ORT_VERSION >= MIN_ORT, reason=f"needs onnxruntime < 1.17; installed {ort.__version__}")
def test_ort_too_old(tmp_path):
    report = doctor.diagnose(_swish_model(tmp_path))
    assert report.codes() == ["ort-too-old"]
    assert "is too old" in report.problems[0].evidence  # the library's own refusal, via ORT
