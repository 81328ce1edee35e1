"""`python -m opforge_trt doctor`: each diagnosis produced from a really broken copy of the library."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import opforge_trt
from opforge_trt import doctor

LIB = Path(opforge_trt.library_path())


def _beside_site_packages(tmp_path) -> Path:
    """A folder for a copy of the library whose RUNPATH ($ORIGIN/../nvidia/...) still finds the
    CUDA runtime wheel: else every diagnosis would be `dependency-missing` where no system CUDA is."""
    folder = tmp_path / "opforge_trt"
    folder.mkdir()
    if (LIB.parent.parent / "nvidia").is_dir():
        (tmp_path / "nvidia").symlink_to(LIB.parent.parent / "nvidia")
    return folder


def _broken(tmp_path, old: bytes, new: bytes, name="libopforge_trt.so.1") -> str:
    data = LIB.read_bytes()
    assert old in data and len(old) == len(new)
    path = _beside_site_packages(tmp_path) / name
    path.write_bytes(data.replace(old, new))
    return str(path)


def _field_type(op: str, attribute: str) -> str:
    """float32 for a float attribute, int32 for an int or enum one (by the spec where installed)."""
    try:
        import opforge_spec
    except ImportError:
        return "float32"
    return "float32" if opforge_spec.OPS[op].attributes[attribute].kind == "float" else "int32"


def test_healthy_library_lists_its_creators():
    """One creator per op of the spec, each declaring the op's attributes (float32[1], or int32[1]
    for an int or enum attribute; its default)."""
    report = doctor.diagnose(with_tensorrt=False)
    assert report.codes() == []
    creators = {(c["namespace"], c["name"], c["version"]): c["fields"] for c in report.facts["creators"]}
    assert set(creators) == {(opforge_trt.NAMESPACE, name, opforge_trt.PLUGIN_VERSION) for name in opforge_trt.OPS}
    for name, attributes in opforge_trt.ATTRIBUTES.items():
        fields = creators[(opforge_trt.NAMESPACE, name, opforge_trt.PLUGIN_VERSION)]
        assert [(f["name"], f["type"], f["length"]) for f in fields] == [(a, _field_type(name, a), 1)
                                                                          for a, _ in attributes], name
        for field, (_, default) in zip(fields, attributes):
            assert abs(field["default"] - default) <= 1e-7 * abs(default), (name, field)  # float32 of the default
    assert creators[("opforge", "GeGLU", "1")] == []  # no attribute: no field
    assert creators[("opforge", "Swish", "1")] == [{"name": "beta", "type": "float32", "length": 1, "default": 1.0}]


def test_cli_exit_status_and_load_hint(tmp_path):
    ok = subprocess.run([sys.executable, "-m", "opforge_trt", "doctor"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "opforge::RMSNorm version 1; fields: epsilon (float32, default 1e-06)" in ok.stdout
    assert "load_library" in ok.stdout and "BEFORE parsing the ONNX model or deserializing the engine" in ok.stdout
    missing = subprocess.run([sys.executable, "-m", "opforge_trt", "doctor", "--library", str(tmp_path / "nope.so")],
                             capture_output=True, text=True)
    assert missing.returncode == 1 and "[library-not-found]" in missing.stdout


def test_path_command():
    out = subprocess.run([sys.executable, "-m", "opforge_trt", "path"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(LIB)


def test_library_not_found(tmp_path):
    assert doctor.diagnose(str(tmp_path / "libopforge_trt.so.1")).codes() == ["library-not-found"]


def test_not_a_library(tmp_path):
    fake = tmp_path / "libopforge_trt.so.1"
    fake.write_text("not an ELF file")
    assert doctor.diagnose(str(fake)).codes() == ["library-not-loadable"]


def test_dependency_missing(tmp_path):
    """NEEDED names a library that does not exist (as libcudart on a machine without CUDA)."""
    report = doctor.diagnose(_broken(tmp_path, b"libgcc_s.so.1\0", b"libgcc_q.so.1\0"))
    assert report.codes() == ["dependency-missing"]
    assert "libgcc_q.so.1" in report.problems[0].message and "LD_LIBRARY_PATH" in report.problems[0].fix


def test_get_creators_not_exported(tmp_path):
    """The dynamic symbol renamed: dlopen works, dlsym("getCreators") does not — what TensorRT
    reports as `SymbolAddress for getCreators could not be loaded`."""
    report = doctor.diagnose(_broken(tmp_path, b"getCreators\0", b"getCreatorz\0"))
    assert report.codes() == ["entry-symbol-missing"]
    assert "SymbolAddress for getCreators" in report.problems[0].message
    assert "extern \"C\"" in report.problems[0].fix and "getCreatorz" in report.problems[0].evidence


def test_mangled_entry_point_is_named(monkeypatch):
    monkeypatch.setattr(doctor, "_exports", lambda library: ["_Z11getCreatorsRi", "setLoggerFinder"])
    report = doctor.Report()
    doctor._check_symbols(report, "libx.so.1", {"symbols": {"getCreators": False, "setLoggerFinder": True,
                                                            "getPluginCreators": False}})
    assert report.codes() == ["entry-symbol-missing"]
    assert "C++-mangled _Z11getCreatorsRi: declare it extern \"C\"" in report.problems[0].fix


def test_logger_finder_missing(tmp_path):
    report = doctor.diagnose(_broken(tmp_path, b"setLoggerFinder\0", b"setLoggerFindex\0"))
    assert report.codes() == ["logger-finder-missing"]


def test_creator_missing(tmp_path):
    # the bytes "RMSNorm\0" end every op name ending in RMSNorm (AddRMSNorm too): one problem each
    renamed = [name for name in opforge_trt.OPS if name.endswith("RMSNorm")]
    report = doctor.diagnose(_broken(tmp_path, b"RMSNorm\0", b"RMSNorn\0"))
    assert report.codes() == ["creator-missing"] * len(renamed)
    problem = next(p for p in report.problems if "opforge::RMSNorm " in p.message)
    assert "no creator opforge::RMSNorm version 1" in problem.message
    assert "opforge::RMSNorn v1" in problem.message  # what the library has instead


def test_field_missing(tmp_path):
    # one field-missing per op with an epsilon field (RMSNorm, AddRMSNorm): the name is shared
    with_epsilon = [name for name, fields in opforge_trt.OPS.items() if "epsilon" in fields]
    report = doctor.diagnose(_broken(tmp_path, b"epsilon\0", b"epsilom\0"))
    assert report.codes() == ["field-missing"] * len(with_epsilon)
    assert all("'epsilon'" in p.message for p in report.problems)


def test_manifest_mismatch(tmp_path):
    lib = _beside_site_packages(tmp_path) / LIB.name
    shutil.copy(LIB, lib)
    manifest = Path(opforge_trt.manifest_path()).read_text()
    (lib.parent / (LIB.name + ".manifest.json")).write_text(manifest.replace('"sha256": "', '"sha256": "00'))
    assert doctor.diagnose(str(lib)).codes() == ["manifest-mismatch"]
