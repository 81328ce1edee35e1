"""What is hashed is what is mapped: every load maps the bytes it verified (a sealed in-memory
copy), init/unload run exactly once per mapping and in order, and a file replaced in place runs
its new code, even while references to the old mapping are held (issue 8, item 3)."""
import os
import shutil
import threading
from collections import defaultdict

import numpy as np
import pytest
from plugin_build import build_c_plugin

import opforge_loader

X = np.arange(4, dtype=np.float32)


@pytest.fixture
def trace(tmp_path, monkeypatch):
    """The file the TRACE build of test_plugin.c appends its ctor/init/unload/dtor lines to."""
    path = tmp_path / "trace.txt"
    monkeypatch.setenv("OPFORGE_TEST_TRACE", str(path))

    def events():
        if not path.exists():
            return []
        return [tuple(line.split()) for line in path.read_text().splitlines()]
    return events


def by_mapping(events):
    """{mapping: [event, ...]}: a mapping's address may be reused only after its dtor."""
    lives, generation = defaultdict(list), defaultdict(int)
    for event, _version, _offset, mapping in events:
        key = (mapping, generation[mapping])
        lives[key].append(event)
        if event == "dtor":
            generation[mapping] += 1
    return dict(lives)


def build_traced(directory, file_name, version, offset):
    return build_c_plugin(directory, file_name, version=version, offset=offset, defines=("TRACE",))


def test_reload_back_to_a_held_file_maps_it_again(registry, plugin_dir, trace):
    v1 = build_traced(plugin_dir, "libops_test_offset.so.1", "1.0.0", 1.0)
    v2 = build_traced(plugin_dir, "libops_test_offset_v2.so.1", "1.1.0", 2.0)
    registry.load(v1)
    held = registry.acquire_op("Offset")
    registry.reload(v2)
    registry.reload(v1)  # v1's first mapping is still held: glibc would hand it back
    np.testing.assert_array_equal(registry.run("Offset", [X]), X + 1)
    np.testing.assert_array_equal(held.run(X), X + 1)
    held.release()
    registry.close()
    events = trace()
    assert [(e, v) for e, v, _, _ in events] == [
        ("ctor", "1.0.0"), ("init", "1.0.0"),
        ("ctor", "1.1.0"), ("init", "1.1.0"),
        ("ctor", "1.0.0"), ("init", "1.0.0"),         # a new mapping of v1's file, not the held one
        ("unload", "1.1.0"), ("dtor", "1.1.0"),       # v2 retired by the reload, no reference held
        ("unload", "1.0.0"), ("dtor", "1.0.0"),       # the held first v1 mapping, at release
        ("unload", "1.0.0"), ("dtor", "1.0.0")], events  # the registered v1 mapping, at close
    assert events[0][3] != events[4][3], "both v1 mappings were alive at once: they must differ"
    assert all(life == ["ctor", "init", "unload", "dtor"] for life in by_mapping(events).values()), events


def test_file_replaced_in_place_runs_its_new_code(registry, plugin_dir, tmp_path, trace):
    lib = build_traced(plugin_dir, "libops_test_offset.so.1", "1.0.0", 1.0)
    registry.load(lib)
    held = registry.acquire_op("Offset")
    registry.unload("test_offset")
    # Same file name, plugin name and version; new bytes and a new sha256 in the manifest.
    staging = build_traced(tmp_path / "staging", "libops_test_offset.so.1", "1.0.0", 7.0)
    for f in (staging, staging.with_name(staging.name + ".manifest.json")):
        shutil.copy(f, plugin_dir / (f.name + ".part"))
        os.replace(plugin_dir / (f.name + ".part"), plugin_dir / f.name)
    registry.load(lib)
    np.testing.assert_array_equal(registry.run("Offset", [X]), X + 7)  # the code that was hashed
    np.testing.assert_array_equal(held.run(X), X + 1)                   # the held old mapping
    held.release()
    registry.close()
    events = trace()
    assert [(e, o) for e, _, o, _ in events] == [
        ("ctor", "1"), ("init", "1"), ("ctor", "7"), ("init", "7"),
        ("unload", "1"), ("dtor", "1"), ("unload", "7"), ("dtor", "7")], events


def test_same_file_loaded_twice_over_time_is_two_mappings(registry, plugin_dir, trace):
    lib = build_traced(plugin_dir, "libops_test_offset.so.1", "1.0.0", 1.0)
    registry.load(lib)
    held = registry.acquire_op("Offset")
    registry.unload("test_offset")
    registry.load(lib)  # same path, same bytes, the first mapping still held
    assert held.run(X).tolist() == registry.run("Offset", [X]).tolist() == (X + 1).tolist()
    held.release()
    registry.close()
    assert all(life == ["ctor", "init", "unload", "dtor"] for life in by_mapping(trace()).values()), trace()
    assert len(by_mapping(trace())) == 2


def test_log_lines_and_listing_name_the_real_file(registry, plugin_dir, log_lines):
    lib = build_c_plugin(plugin_dir, "libops_test_offset.so.1")
    registry.load(lib)
    assert [o.library for o in registry.ops()] == [str(lib)]
    registry.unload("test_offset")
    assert not any("/proc/self/fd" in line for line in log_lines), log_lines
    assert any(line.endswith(f"file={lib}") for line in log_lines if "dlclose" in line)


def test_dlopen_failure_names_the_real_file(registry, plugin_dir):
    lib = plugin_dir / "libops_test_notelf.so.1"
    lib.write_bytes(b"\x7fELF not really")
    from plugin_build import write_manifest
    write_manifest(lib, name="notelf")
    with pytest.raises(opforge_loader.OpforgeError) as info:
        registry.load(lib)
    message = str(info.value)
    assert "dlopen failed" in message and str(lib) in message and "/proc/self/fd" not in message, message
    assert registry.ops() == []


def test_third_party_plugin_reloaded_from_four_threads_while_held(sdk_plugins):
    """Issue 8: alternating v1/v2 reloads from 4 threads while references are held gave
    220-3,064 failed calls ("called while the plugin is not initialized")."""
    x = np.arange(3, dtype=np.float32)
    expected = {"1.0.0": x, "1.1.0": x + 100}
    failures, reloads = [], [0]
    lock = threading.Lock()
    reg = opforge_loader.Registry(log=lambda level, line: None)
    reg.load(sdk_plugins["1.0.0"])

    def worker(index):
        for i in range(40):
            try:
                with reg.acquire("acme::AddOffset") as op:
                    reg.reload(sdk_plugins["1.1.0" if (i + index) % 2 else "1.0.0"])
                    with lock:
                        reloads[0] += 1
                    y = op.run(x)
                    if y.tolist() != expected[op.plugin_version].tolist():
                        failures.append(f"{op.plugin_version}: {y.tolist()}")
            except opforge_loader.OpforgeError as error:
                failures.append(str(error))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    reg.close()
    assert failures == [], f"{len(failures)} failed calls, first: {failures[:3]}"
    assert reloads[0] == 160
