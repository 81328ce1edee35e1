"""One manifest format for every kind: opforge, onnxruntime, tensorrt; and
register_with_onnxruntime checking manifests before register_custom_ops_library."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
from plugin_build import write_manifest

import opforge_loader
from opforge_loader.runtimes import register_with_onnxruntime

SCHEMA = Path(__file__).resolve().parents[1] / "manifest.schema.json"


def fake_library(d: Path, name: str, entry: str) -> Path:
    """A real shared library exporting a runtime's entry point (it returns NULL: "no error" for ORT)."""
    src = d / f"{name}.c"
    src.write_text(f'__attribute__((visibility("default"))) void* {entry}(void* a, const void* b) {{ (void)a; (void)b; return 0; }}\n')
    lib = d / name
    subprocess.run(["gcc", "-shared", "-fPIC", "-fvisibility=hidden", f"-Wl,-soname,{name}", "-o", str(lib), str(src)], check=True)
    return lib


ORT_OPS = [{"domain": "opforge", "name": "Swish", "version": 1}, {"domain": "opforge", "name": "RMSNorm", "version": 1}]


@pytest.fixture
def ort_lib(plugin_dir):
    lib = fake_library(plugin_dir, "libopforge_ort.so.1", "RegisterCustomOps")
    write_manifest(lib, name="opforge_ort", version="0.1.0", kind="onnxruntime", api_version=17,
                   sdk={"min": "1.17", "max": None}, ops=ORT_OPS)
    return lib


@pytest.fixture
def trt_lib(plugin_dir):
    lib = fake_library(plugin_dir, "libopforge_trt.so.1", "getCreators")
    write_manifest(lib, name="opforge_trt", version="0.1.0", kind="tensorrt", api_version=10,
                   sdk={"min": "10.0", "max": "10.99"}, ops=ORT_OPS)
    return lib


def test_onnxruntime_and_tensorrt_manifests_validate(ort_lib, trt_lib):
    for lib, runtime in ((ort_lib, "1.20.1"), (trt_lib, "10.14.1")):
        opforge_loader.check_manifest(str(lib) + ".manifest.json", runtime)
        opforge_loader.check_manifest(str(lib) + ".manifest.json")
    with pytest.raises(opforge_loader.OpforgeError, match=r"sdk range \[10.0, 10.99\] does not include runtime version 11.0"):
        opforge_loader.check_manifest(str(trt_lib) + ".manifest.json", "11.0")


def test_schema_file_describes_the_format(ort_lib):
    schema = json.loads(SCHEMA.read_text())
    manifest = json.loads(Path(str(ort_lib) + ".manifest.json").read_text())
    assert set(schema["required"]) == set(manifest)
    assert schema["properties"]["kind"]["enum"] == ["opforge", "onnxruntime", "tensorrt"]


def test_list_shows_other_kinds(ort_lib, trt_lib):
    script = Path(sys.executable).parent / "opforge-loader"  # the installed console script
    out = subprocess.run([str(script), "list", str(ort_lib.parent), "--json"], capture_output=True, text=True, check=True).stdout
    rows = json.loads(out)["ops"]
    assert {(r["plugin"], r["kind"], r["state"]) for r in rows} == {
        ("opforge_ort", "onnxruntime", "manifest ok"), ("opforge_trt", "tensorrt", "manifest ok")}


class RecordingOptions:
    def __init__(self):
        self.registered = []

    def register_custom_ops_library(self, path):
        self.registered.append(path)


def test_register_with_onnxruntime_checks_first(ort_lib, trt_lib):
    opts = RecordingOptions()
    assert register_with_onnxruntime(opts, ort_lib.parent, ort_version="1.20.1") == [str(ort_lib)]
    assert opts.registered == [str(ort_lib)]


@pytest.mark.parametrize("breakage, fragment", [
    ("sha", "sha256 mismatch"),
    ("api", "needs ORT API 21, onnxruntime 1.17.3 provides 17"),
    ("sdk", "sdk range [1.18, any] does not include runtime version 1.17.3"),
])
def test_register_with_onnxruntime_refuses_and_registers_nothing(ort_lib, plugin_dir, breakage, fragment):
    second = fake_library(plugin_dir, "libzz_other_ort.so.1", "RegisterCustomOps")
    overrides = {"sha": {"sha256": "0" * 64}, "api": {"api_version": 21}, "sdk": {"sdk": {"min": "1.18", "max": None}}}[breakage]
    write_manifest(second, name="other_ort", version="0.1.0", kind="onnxruntime",
                   **{"api_version": 17, "sdk": {"min": "1.17", "max": None}, "ops": ORT_OPS, **overrides})
    opts = RecordingOptions()
    with pytest.raises(opforge_loader.OpforgeError) as info:
        register_with_onnxruntime(opts, plugin_dir, ort_version="1.17.3")
    assert fragment in str(info.value) and "libzz_other_ort.so.1" in str(info.value)
    assert opts.registered == []


def test_register_with_real_onnxruntime(ort_lib):
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime not installed in this environment")
    opts = ort.SessionOptions()
    assert register_with_onnxruntime(opts, ort_lib.parent) == [str(ort_lib)]


def test_cli_writes_and_rehashes_manifests(plugin_dir):
    lib = fake_library(plugin_dir, "libopforge_trt.so.1", "getCreators")
    cli = [sys.executable, "-m", "opforge_loader.cli", "manifest"]
    subprocess.run([*cli, str(lib), "--name", "opforge_trt", "--version", "0.1.0", "--kind", "tensorrt", "--api-version", "10",
                    "--sdk-min", "10.0", "--op", "opforge:Swish:1", "--op", "opforge:RMSNorm:1"], check=True, capture_output=True)
    manifest = Path(str(lib) + ".manifest.json")
    assert json.loads(manifest.read_text())["ops"] == ORT_OPS
    subprocess.run(["strip", str(lib)], check=True)  # what packaging tools do to a library
    with pytest.raises(opforge_loader.OpforgeError, match="sha256 mismatch"):
        opforge_loader.check_manifest(manifest)
    subprocess.run([*cli, str(manifest), "--rehash"], check=True, capture_output=True)
    opforge_loader.check_manifest(manifest)
