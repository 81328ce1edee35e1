"""Every refusal: a clear message naming the file and the reason, and an unchanged registry."""
import json
import os

import pytest
from conftest import snapshot
from plugin_build import ELF32_I386, build_c_plugin, foreign_machine

import opforge_loader

SHIPPED_SCALE = os.path.join(opforge_loader.plugin_dir(), "libops_example_scale.so.1")


@pytest.fixture
def loaded(registry):
    registry.load(SHIPPED_SCALE)
    return registry


def refused(reg, lib, *fragments, reload=False):
    before = snapshot(reg)
    with pytest.raises(opforge_loader.OpforgeError) as info:
        (reg.reload if reload else reg.load)(lib)
    message = str(info.value)
    assert f"refused {os.path.realpath(lib)}" in message, message
    for fragment in fragments:
        assert fragment in message, message
    assert snapshot(reg) == before
    assert reg.run("Scale", [__import__("numpy").ones(2, "float32")], {"scale": 3.0}).tolist() == [3.0, 3.0]
    return message


def test_api_version_out_of_range_in_manifest(loaded, plugin_dir):
    lib = build_c_plugin(plugin_dir, "libops_test_api.so.1", api_version=99)
    refused(loaded, lib, "api_version 99 out of range", "[1, 1]")


def test_api_version_out_of_range_in_library(loaded, plugin_dir, log_lines):
    lib = build_c_plugin(plugin_dir, "libops_test_api.so.1", defines=("API_VERSION=7",))
    refused(loaded, lib, "api_version 7 out of range")
    assert any("dlclose" in line and "libops_test_api" in line for line in log_lines)


def test_missing_entry_symbol(loaded, plugin_dir):
    lib = build_c_plugin(plugin_dir, "libops_test_noentry.so.1", defines=("ENTRY_NAME=opforge_plugin_entry_v0",),
                         hidden=False)
    refused(loaded, lib, "missing entry symbol opforge_plugin_entry")


def test_sha256_mismatch(loaded, plugin_dir):
    lib = build_c_plugin(plugin_dir, "libops_test_sha.so.1", sha256="0" * 64)
    refused(loaded, lib, "sha256 mismatch", "0" * 64)


def test_library_changed_after_manifest(loaded, plugin_dir):
    lib = build_c_plugin(plugin_dir, "libops_test_sha.so.1")
    with open(lib, "ab") as f:
        f.write(b"\0")
    refused(loaded, lib, "sha256 mismatch")


def _set(key, value):
    return lambda data: {**data, key: value}


@pytest.mark.parametrize("text, fragment", [
    ("{not json", "malformed manifest: line 1 col 2"),
    ('{"manifest_version": 1}', 'missing field "name"'),
    (_set("api_version", "1"), '"api_version": expected integer, got string'),
    (_set("kind", "tvm"), '"kind": expected opforge, onnxruntime or tensorrt'),
    (_set("ops", []), '"ops": expected non-empty array'),
    (_set("library", "libother.so.1"), '"library": expected "libops_test_bad.so.1"'),
    (_set("sha256", "XYZ"), '"sha256": expected 64 lowercase hex digits'),
    (_set("manifest_version", 2), '"manifest_version": expected 1, got 2'),
], ids=["syntax", "missing-field", "type", "kind", "ops", "library", "sha-format", "manifest-version"])
def test_malformed_manifest(loaded, plugin_dir, text, fragment):
    lib = build_c_plugin(plugin_dir, "libops_test_bad.so.1")
    mpath = lib.with_name(lib.name + ".manifest.json")
    if callable(text):
        text = json.dumps(text(json.loads(mpath.read_text())))
    mpath.write_text(text)
    refused(loaded, lib, "malformed manifest", fragment)


def test_missing_manifest(loaded, plugin_dir):
    lib = build_c_plugin(plugin_dir, "libops_test_nomanifest.so.1", manifest=False)
    refused(loaded, lib, "missing manifest")


def test_manifest_ops_must_match_library(loaded, plugin_dir):
    lib = build_c_plugin(plugin_dir, "libops_test_ops.so.1", ops=[{"domain": "test", "name": "Other", "version": 1}])
    refused(loaded, lib, "ops mismatch", "test::Other@1", "test::Offset@1")


def test_duplicate_op_name_and_version(loaded, plugin_dir):
    lib = build_c_plugin(plugin_dir, "libops_test_dup.so.1", name="dup_scale", op="Scale")
    msg = refused(loaded, lib, "duplicate op Scale version 1", "already registered by plugin example_scale")
    assert "libops_example_scale.so.1" in msg


def test_same_plugin_loaded_twice(loaded):
    with pytest.raises(opforge_loader.OpforgeError, match=r"already loaded .use reload"):
        loaded.load(SHIPPED_SCALE)


@pytest.mark.parametrize("target", ["file", "directory"])
def test_world_writable(loaded, plugin_dir, target):
    lib = build_c_plugin(plugin_dir, "libops_test_ww.so.1")
    path = lib if target == "file" else plugin_dir
    os.chmod(path, os.stat(path).st_mode | 0o002)
    try:
        refused(loaded, lib, f"world-writable {target} {path}")
    finally:
        os.chmod(path, os.stat(path).st_mode & ~0o002)


def test_init_failure(loaded, plugin_dir, log_lines):
    lib = build_c_plugin(plugin_dir, "libops_test_init.so.1", defines=("INIT_FAIL",))
    refused(loaded, lib, "init failed (status 4): device not ready (test)")
    transitions = [line for line in log_lines if "op=test::Offset@1" in line]
    assert [line.split(" to=")[1].split()[0] for line in transitions] == [
        "Loaded", "Registered", "Initializing", "Unregistering"]


def test_kind_onnxruntime_not_loaded_by_host(loaded, plugin_dir):
    lib = build_c_plugin(plugin_dir, "libops_test_ort.so.1", kind="onnxruntime", api_version=17)
    refused(loaded, lib, 'kind "onnxruntime" is not loaded by the opforge host')


def test_sdk_range_excludes_host(loaded, plugin_dir):
    lib = build_c_plugin(plugin_dir, "libops_test_sdk.so.1", sdk={"min": "9.0", "max": None})
    refused(loaded, lib, "sdk range [9.0, any] does not include runtime version 0.1.0")


def test_reload_of_unknown_plugin(loaded, plugin_dir):
    lib = build_c_plugin(plugin_dir, "libops_test_new.so.1", name="never_loaded")
    refused(loaded, lib, "reload of plugin never_loaded, which is not loaded", reload=True)


def test_load_dir_counts_refusals(registry, plugin_dir):
    build_c_plugin(plugin_dir, "libops_a_good.so.1", name="good")
    build_c_plugin(plugin_dir / "sub", "libops_b_bad.so.1", name="bad", op="Other", sha256="1" * 64)
    os.chmod(plugin_dir / "sub", 0o755)
    assert registry.load_dir(plugin_dir) == (1, 1)
    assert registry.plugins() == ["good"]
    assert len(registry.refusals) == 1 and "sha256 mismatch" in registry.refusals[0]


def test_scan_reports_library_without_manifest(registry, plugin_dir):
    build_c_plugin(plugin_dir, "libops_test_orphan.so.1", manifest=False)
    assert registry.load_dir(plugin_dir) == (0, 1)
    assert "missing manifest" in registry.refusals[0] and "libops_test_orphan.so.1" in registry.refusals[0]
    assert registry.ops() == []



def test_library_built_for_another_machine(loaded, plugin_dir):
    machine, found, expected = foreign_machine()
    lib = build_c_plugin(plugin_dir, "libops_test_foreign.so.1", header_patch={18: machine.to_bytes(2, "little")})
    message = refused(loaded, lib, f"built for another machine: expected {expected}, found {found} (e_machine {machine})")
    assert "No such file" not in message


def test_32_bit_library(loaded, plugin_dir):
    lib = build_c_plugin(plugin_dir, "libops_test_elf32.so.1", header_patch=ELF32_I386)
    refused(loaded, lib, "wrong ELF class: expected a 64-bit", "found a 32-bit x86 (i386) one (EI_CLASS 1)")
