"""$ORIGIN dependencies of a plugin mapped from its verified in-memory copy (issue 8, loader).

Mapped from /proc/self/fd/N, a plugin's $ORIGIN would name /proc/self/fd. The host reads the
plugin's DT_NEEDED and DT_RUNPATH/DT_RPATH from the verified bytes, dlopens each dependency that
$ORIGIN finds from the plugin's real directory first, and glibc binds the plugin to it by SONAME.
Each dependency here exists ONLY next to the plugin, so a load that works proves the binding."""
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import snapshot
from plugin_build import build_c_plugin, build_dependency, build_origin_plugin, write_manifest

import opforge_loader

X = np.arange(4, dtype=np.float32)


def mapped_paths() -> set[str]:
    """Files mapped into this process now."""
    lines = Path("/proc/self/maps").read_text().splitlines()
    return {line.split(None, 5)[5] for line in lines if len(line.split(None, 5)) == 6}


@pytest.mark.parametrize("dtags", ["--enable-new-dtags", "--disable-new-dtags"], ids=["runpath", "rpath"])
def test_origin_dependency_loads_reloads_and_unloads(registry, plugin_dir, log_lines, dtags):
    helper_v1 = build_dependency(plugin_dir, "libx_helper.so.2", 10.0)
    helper_v2 = build_dependency(plugin_dir, "libx_helper.so.3", 20.0)  # v2 changed it: new SONAME
    v1 = build_origin_plugin(plugin_dir, "libops_x.so.1", helper_v1, dtags=dtags)
    v2 = build_origin_plugin(plugin_dir, "libops_x_v2.so.1", helper_v2, version="1.1.0", dtags=dtags)

    registry.load(v1)
    np.testing.assert_array_equal(registry.run("Offset", [X]), X + 10)  # called into the dependency
    held = registry.acquire_op("Offset")
    registry.reload(v2)
    np.testing.assert_array_equal(registry.run("Offset", [X]), X + 20)
    np.testing.assert_array_equal(held.run(X), X + 10)  # the held v1 still runs with its own
    assert str(helper_v1) in mapped_paths()
    held.release()
    assert str(helper_v1) not in mapped_paths(), "v1's dependency must close with v1"
    registry.unload("x_origin")
    assert registry.ops() == []
    assert not {str(helper_v1), str(helper_v2)} & mapped_paths()
    assert [line.split()[3] for line in log_lines if "dlclose" in line] == ["version=1.0.0", "version=1.1.0"]
    assert not any(line.startswith("opforge-loader dependency") or "/proc/self/fd" in line for line in log_lines)


def test_versions_sharing_one_dependency_reload_and_unload(registry, plugin_dir, log_lines):
    helper = build_dependency(plugin_dir, "libx_helper.so.2", 10.0)
    v1 = build_origin_plugin(plugin_dir, "libops_x.so.1", helper)
    v2 = build_origin_plugin(plugin_dir, "libops_x_v2.so.1", helper, version="1.1.0")
    registry.load(v1)
    registry.reload(v2)  # the dependency is still loaded by v1 until it drains: shared, not reloaded
    registry.reload(v1)
    np.testing.assert_array_equal(registry.run("Offset", [X]), X + 10)
    registry.unload("x_origin")
    assert str(helper) not in mapped_paths()
    assert not any("opforge-loader dependency" in line for line in log_lines), log_lines


def test_origin_subdirectory_and_dependency_of_a_dependency(registry, plugin_dir):
    """RUNPATH $ORIGIN/../lib (mmdeploy-style folders); that library finds its own dependency
    through its own $ORIGIN, which names its real directory."""
    lib_dir, bin_dir = plugin_dir / "lib", plugin_dir / "bin"
    lib_dir.mkdir()
    inner, outer = lib_dir / "libx_inner.so.1", lib_dir / "libx_outer.so.1"
    (plugin_dir / "inner.c").write_text("float inner_value(void) { return 5.0f; }\n")
    (plugin_dir / "outer.c").write_text("float inner_value(void);\n"
                                        "float dependency_offset(void) { return inner_value(); }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libx_inner.so.1", "-o", str(inner),
                    str(plugin_dir / "inner.c")], check=True)
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libx_outer.so.1", "-o", str(outer),
                    str(plugin_dir / "outer.c"), f"-L{lib_dir}", "-l:libx_inner.so.1", "-Wl,-rpath,$ORIGIN"],
                   check=True)
    plugin = build_c_plugin(bin_dir, "libops_x.so.1", name="x_origin", defines=("DEPENDENCY_OFFSET",),
                            link_args=(f"-L{lib_dir}", "-l:libx_outer.so.1", f"-Wl,-rpath-link,{lib_dir}",
                                       "-Wl,-rpath,$ORIGIN/../lib"))
    os.chmod(bin_dir, 0o755)
    registry.load(plugin)
    np.testing.assert_array_equal(registry.run("Offset", [X]), X + 5)
    registry.unload("x_origin")
    assert not {str(inner), str(outer)} & mapped_paths()


def test_missing_origin_dependency_is_refused_naming_plugin_and_dependency(registry, plugin_dir, tmp_path):
    good = build_c_plugin(plugin_dir, "libops_good.so.1", name="good", op="Good",
                          ops=[{"domain": "test", "name": "Good", "version": 1}])
    registry.load(good)
    before = snapshot(registry)
    helper = build_dependency(tmp_path / "elsewhere", "libx_helper.so.2", 10.0)  # not next to the plugin
    lib = build_origin_plugin(plugin_dir, "libops_x.so.1", helper)
    with pytest.raises(opforge_loader.OpforgeError) as info:
        registry.load(lib)
    message = str(info.value)
    assert f"refused {lib}" in message, message
    assert "libx_helper.so.2: cannot open shared object file" in message, message
    assert f"$ORIGIN in the plugin's search path was looked up in {plugin_dir}" in message, message
    assert "/proc/self/fd" not in message, message
    assert snapshot(registry) == before


def test_dependency_without_the_soname_it_is_needed_by_is_refused(registry, plugin_dir):
    """glibc matches a loaded library to a DT_NEEDED only by SONAME: without it the plugin could
    never bind to the file next to it, so the refusal says how to fix the dependency."""
    helper = build_dependency(plugin_dir, "libdep_test.so", 3.0, soname="")
    lib = build_origin_plugin(plugin_dir, "libops_x.so.1", helper)
    with pytest.raises(opforge_loader.OpforgeError) as info:
        registry.load(lib)
    message = str(info.value)
    assert f"refused {lib}" in message, message
    assert f"dependency libdep_test.so found through $ORIGIN at {helper} does not carry the SONAME libdep_test.so" \
        in message and "-Wl,-soname,libdep_test.so" in message, message
    assert registry.ops() == []
    assert str(helper) not in mapped_paths()


def test_needed_written_as_an_origin_path_is_refused(registry, plugin_dir):
    """DT_NEEDED "$ORIGIN/libx_helper.so" (a dependency whose SONAME is that path): glibc compares
    it unexpanded with the loaded objects, so no preloaded copy can satisfy it."""
    helper = build_dependency(plugin_dir, "libx_helper.so", 3.0, soname="$ORIGIN/libx_helper.so")
    lib = build_c_plugin(plugin_dir, "libops_x.so.1", name="x_origin", defines=("DEPENDENCY_OFFSET",),
                         link_args=(str(helper),))
    with pytest.raises(opforge_loader.OpforgeError) as info:
        registry.load(lib)
    message = str(info.value)
    assert f'refused {lib}: DT_NEEDED "$ORIGIN/libx_helper.so" names its dependency by a $ORIGIN path' in message
    assert "link the dependency by its SONAME" in message, message
    assert registry.ops() == []


@pytest.mark.parametrize("writable", ["directory", "file"])
def test_world_writable_origin_dependency_is_refused_before_it_runs(registry, plugin_dir, writable):
    deps = plugin_dir / "deps"
    helper = build_dependency(deps, "libx_helper.so.2", 10.0)
    lib = build_origin_plugin(plugin_dir, "libops_x.so.1", helper, search="$ORIGIN/deps")
    target = deps if writable == "directory" else helper
    os.chmod(target, os.stat(target).st_mode | 0o002)
    with pytest.raises(opforge_loader.OpforgeError) as info:
        registry.load(lib)
    message = str(info.value)
    assert f"refused {lib}" in message and "dependency libx_helper.so.2 found through $ORIGIN" in message, message
    assert f"world-writable {writable} {target}" in message, message
    assert registry.ops() == []
    assert str(helper) not in mapped_paths()


def test_soname_already_loaded_from_another_file_is_used_and_logged(registry, plugin_dir, tmp_path, log_lines):
    """As for any library, glibc binds a DT_NEEDED to the object already loaded under that SONAME;
    the host says so when that is not the file next to the plugin."""
    first = build_dependency(plugin_dir, "libx_helper.so.2", 10.0)
    other_dir = tmp_path / "other"
    other_dir.mkdir(mode=0o755)
    second = build_dependency(other_dir, "libx_helper.so.2", 30.0)
    registry.load(build_origin_plugin(plugin_dir, "libops_x.so.1", first))
    lib = build_origin_plugin(other_dir, "libops_y.so.1", second, name="y_origin", op="OffsetY")
    registry.load(lib)
    np.testing.assert_array_equal(registry.run("OffsetY", [X]), X + 10)
    warnings = [line for line in log_lines if line.startswith("opforge-loader dependency")]
    assert len(warnings) == 1, log_lines
    assert f"file={lib} needed=libx_helper.so.2 origin={second} uses={first}" in warnings[0], warnings
    assert "already loaded" in warnings[0] and "new SONAME" in warnings[0], warnings


def _corrupt_dynamic_offset(lib: Path) -> None:
    """Point the plugin's PT_DYNAMIC past the end of the file."""
    data = bytearray(lib.read_bytes())
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    for i in range(phnum):
        at = phoff + i * phentsize
        if struct.unpack_from("<I", data, at)[0] == 2:  # PT_DYNAMIC
            struct.pack_into("<Q", data, at + 8, len(data) + 4096)
    lib.write_bytes(bytes(data))


def test_malformed_dynamic_section_is_refused_before_dlopen(registry, plugin_dir):
    lib = build_c_plugin(plugin_dir, "libops_test_offset.so.1")
    _corrupt_dynamic_offset(lib)
    write_manifest(lib, name="test_offset")
    with pytest.raises(opforge_loader.OpforgeError) as info:
        registry.load(lib)
    message = str(info.value)
    assert f"refused {lib}: malformed ELF dynamic section in {lib}: PT_DYNAMIC" in message, message
    assert "lies outside the file" in message, message
    assert registry.ops() == []


def test_glibc_binds_the_preloaded_dependency_by_soname(plugin_dir):
    """LD_DEBUG of a fresh process: once the plugin's mapping is made, its DT_NEEDED is never
    searched for on disk (it would look in /proc/self/fd); the dependency is mapped once, from the
    plugin's directory, and finalized after the plugin."""
    helper = build_dependency(plugin_dir, "libx_helper.so.2", 10.0)
    lib = build_origin_plugin(plugin_dir, "libops_x.so.1", helper)
    script = ("import sys, numpy as np, opforge_loader as ol\n"
              "reg = ol.Registry(log=lambda level, line: None)\n"
              "reg.load(sys.argv[1])\n"
              "print(reg.run('Offset', [np.ones(2, np.float32)]).tolist())\n"
              "maps = [l.split() for l in open('/proc/self/maps')]\n"
              "print(sum(m[-1] == sys.argv[2] and m[2] == '00000000' for m in maps))\n"  # mappings of it
              "reg.close()\n")
    proc = subprocess.run([sys.executable, "-c", script, str(lib), str(helper)], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, LD_DEBUG="libs,files"))
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.split() == ["[11.0,", "11.0]", "1"], proc.stdout
    mapped = re.search(r"file=(/proc/self/fd/\d+) \[0\];  generating link map", proc.stderr)
    assert mapped, proc.stderr[-4000:]
    after = proc.stderr[mapped.end():]
    assert "find library=libx_helper.so.2" not in after and "/proc/self/fd/libx_helper" not in after, after[:4000]
    assert after.index(f"calling fini: {mapped.group(1)}") < after.index(f"calling fini: {helper}"), after[:4000]
