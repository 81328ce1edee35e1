"""Load, acquire, hot reload, deferred unload, watch/sync, states and their log lines."""
import os
import re
import shutil
import threading

import numpy as np
import pytest
from plugin_build import build_c_plugin

import opforge_loader

X = np.arange(4, dtype=np.float32)


def states_of(log_lines, op="test::Offset@1"):
    return [(re.search(r"from=(\S+)", line).group(1), re.search(r"to=(\S+)", line).group(1), int(re.search(r"refs=(\d+)", line).group(1)))
            for line in log_lines if line.startswith("opforge-loader state") and f"op={op}" in line]


def test_state_machine_log_lines(registry, plugin_dir, log_lines):
    lib = build_c_plugin(plugin_dir, "libops_test_offset.so.1")
    registry.load(lib)
    (info,) = registry.ops()
    assert (info.plugin, info.name, info.domain, info.version, info.state, info.refs) == (
        "test_offset", "Offset", "test", "1.0", "Running", 0)
    assert info.inputs[0].name == "X" and info.inputs[0].dtypes == ("float32",)
    with registry.acquire("test::Offset") as op:
        assert registry.ops()[0].refs == 1
        registry.unload("test_offset")
        assert registry.ops() == []
        assert not any("dlclose" in line for line in log_lines), "unloaded while a reference was held"
        np.testing.assert_array_equal(op.run(X), X + 1)  # still callable: the library stays mapped
    assert any(line.startswith("opforge-loader dlclose plugin=test_offset") for line in log_lines)
    assert states_of(log_lines) == [("-", "Loaded", 0), ("Loaded", "Registered", 0), ("Registered", "Initializing", 0),
                                    ("Initializing", "Running", 0), ("Running", "Unregistering", 1)]
    line = next(entry for entry in log_lines if "to=Running" in entry)
    assert line == "opforge-loader state plugin=test_offset version=1.0.0 op=test::Offset@1 from=Initializing to=Running refs=0"


def test_hot_reload_swaps_while_old_refs_drain(registry, plugin_dir, log_lines):
    v1 = build_c_plugin(plugin_dir, "libops_test_offset.so.1", version="1.0.0", offset=1.0)
    v2 = build_c_plugin(plugin_dir, "libops_test_offset_v2.so.1", version="1.1.0", offset=2.0)
    registry.load(v1)
    old = registry.acquire_op("Offset")
    registry.reload(v2)
    assert [(o.plugin_version, o.library) for o in registry.ops()] == [("1.1.0", str(v2))]
    with registry.acquire("Offset") as new:
        np.testing.assert_array_equal(new.run(X), X + 2)
        assert new.plugin_version == "1.1.0"
    np.testing.assert_array_equal(old.run(X), X + 1)  # the caller that held v1 keeps v1
    assert not any("dlclose" in line and "version=1.0.0" in line for line in log_lines)
    old.release()
    assert any("dlclose" in line and "version=1.0.0" in line for line in log_lines)
    assert any(line.startswith("opforge-loader reload plugin=test_offset version=1.1.0") for line in log_lines)


def test_version_selection(registry, plugin_dir):
    registry.load(build_c_plugin(plugin_dir, "libops_test_offset.so.1"))
    with pytest.raises(opforge_loader.OpforgeError, match="no op Offset version 2 is registered"):
        registry.acquire_op("Offset", 2)
    with pytest.raises(opforge_loader.OpforgeError, match="no op other::Offset is registered"):
        registry.acquire_op("other::Offset")
    assert registry.run("Offset", [X], version=1).tolist() == (X + 1).tolist()


def test_same_named_helpers_do_not_interfere(registry, plugin_dir):
    """Seed 000 §5.2: two plugins, each with a global helper_impl(); each must call its own."""
    a = build_c_plugin(plugin_dir, "libops_test_a.so.1", name="helper_a", op="AddA", offset=10.0)
    b = build_c_plugin(plugin_dir, "libops_test_b.so.1", name="helper_b", op="AddB", offset=20.0)
    registry.load(a)
    registry.load(b)
    assert registry.run("AddA", [X]).tolist() == (X + 10).tolist()
    assert registry.run("AddB", [X]).tolist() == (X + 20).tolist()


def test_sync_picks_up_new_replaced_and_removed(registry, plugin_dir, tmp_path, log_lines):
    staging = tmp_path / "staging"
    v1 = build_c_plugin(staging / "v1", "libops_test_offset.so.1", version="1.0.0", offset=1.0)
    v2 = build_c_plugin(staging / "v2", "libops_test_offset.so.1", version="1.0.1", offset=5.0)
    assert registry.sync(plugin_dir) == 0
    for f in (v1, v1.with_name(v1.name + ".manifest.json")):
        shutil.copy(f, plugin_dir)
    assert registry.sync(plugin_dir) == 1
    assert registry.sync(plugin_dir) == 0  # unchanged files: nothing to do
    held = registry.acquire_op("Offset")
    # Replace in place (same file name, new inode): the host maps a private snapshot of it.
    for f in (v2, v2.with_name(v2.name + ".manifest.json")):
        tmp = plugin_dir / (f.name + ".tmp")
        shutil.copy(f, tmp)
        os.replace(tmp, plugin_dir / f.name)
    assert registry.sync(plugin_dir) == 1
    assert registry.run("Offset", [X]).tolist() == (X + 5).tolist()
    assert held.run(X).tolist() == (X + 1).tolist()
    held.release()
    # A broken update is refused once, the running version stays.
    (plugin_dir / "libops_test_offset.so.1.manifest.json").write_text("{")
    assert registry.sync(plugin_dir) == 0
    assert registry.sync(plugin_dir) == 0
    assert sum("refuse" in line and "malformed manifest" in line for line in log_lines) == 1
    assert registry.ops()[0].plugin_version == "1.0.1"
    for f in plugin_dir.iterdir():
        f.unlink()
    assert registry.sync(plugin_dir) == 1
    assert registry.ops() == []


def test_sync_prefers_highest_version(registry, plugin_dir):
    build_c_plugin(plugin_dir, "libops_test_offset.so.1", version="1.0.0", offset=1.0)
    build_c_plugin(plugin_dir, "libops_test_offset.so.2", version="2.0.0", offset=2.0)
    registry.sync(plugin_dir)
    assert [o.plugin_version for o in registry.ops()] == ["2.0.0"]


def test_threads_call_while_reloading(registry, plugin_dir):
    """Python-level smoke of the C++ stress test: no failed call on a held reference."""
    libs = [build_c_plugin(plugin_dir, f"libops_test_offset_{i}.so.1", version=f"1.0.{i}", offset=float(i + 1)) for i in range(2)]
    registry.load(libs[0])
    stop = threading.Event()
    failures = []

    def caller():
        while not stop.is_set():
            try:
                with registry.acquire("Offset") as op:
                    y = op.run(X)
                    expected = float(op.plugin_version.rsplit(".", 1)[1]) + 1
                    if y.tolist() != (X + expected).tolist():
                        failures.append((op.plugin_version, y.tolist()))
            except opforge_loader.OpforgeError as e:
                if "no op" not in str(e):
                    failures.append(str(e))

    threads = [threading.Thread(target=caller) for _ in range(4)]
    for t in threads:
        t.start()
    for i in range(60):
        registry.reload(libs[(i + 1) % 2])
        if i % 10 == 9:
            registry.unload("test_offset")
            registry.load(libs[i % 2])
    stop.set()
    for t in threads:
        t.join()
    assert failures == []
