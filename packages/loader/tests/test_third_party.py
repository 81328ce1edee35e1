"""A plugin written outside the repo, against only the installed SDK (header + find_package),
built, loaded, run, reloaded and unloaded through the Python API and the CLI."""
import json
import os
import queue
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import opforge_loader

CLI = [sys.executable, "-m", "opforge_loader.cli"]


def cli(*args, check=True):
    proc = subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, timeout=120)
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


@pytest.fixture(scope="module")
def third_party(sdk_plugins):
    """The build folders of v1.0.0 and v1.1.0 (default offset moved by +100, so the swap is
    observable) of 'acme_offset', each from a fresh `new-plugin` project (conftest.sdk_plugins)."""
    return {version: lib.parent for version, lib in sdk_plugins.items()}


def test_template_uses_only_installed_sdk(third_party):
    build = third_party["1.0.0"]
    cache = (build / "CMakeCache.txt").read_text()
    assert re.search(rf"opforge_plugin_DIR:\w+={re.escape(opforge_loader.cmake_dir())}\n", cache)
    flags = (build / "CMakeFiles" / "ops_acme_offset.dir" / "flags.make").read_text()
    assert f"-isystem {opforge_loader.include_dir()}" in flags and "packages/loader" not in flags
    lib = build / "libops_acme_offset.so.1"
    manifest = json.loads((build / "libops_acme_offset.so.1.manifest.json").read_text())
    assert manifest["name"] == "acme_offset" and manifest["library"] == lib.name
    assert manifest["ops"] == [{"domain": "acme", "name": "AddOffset", "version": 1}]
    exported = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True).stdout.split()
    assert [s for s in exported if not s.isupper() and len(s) > 1 and not re.fullmatch(r"[0-9a-f]+", s)] == ["opforge_plugin_entry"]


def test_python_api_load_run_reload_unload(third_party):
    v1 = third_party["1.0.0"] / "libops_acme_offset.so.1"
    v2 = third_party["1.1.0"] / "libops_acme_offset.so.1"
    x = np.arange(3, dtype=np.float32)
    lines = []
    with opforge_loader.Registry(log=lambda level, line: lines.append(line)) as reg:
        reg.load(v1)
        with reg.acquire("acme::AddOffset") as op:
            np.testing.assert_array_equal(op.run(x, offset=1.5), x + 1.5)
            reg.reload(v2)
            np.testing.assert_array_equal(reg.run("AddOffset", [x]), x + 100)
            np.testing.assert_array_equal(op.run(x), x)  # held v1 still answers as v1
        assert [o.plugin_version for o in reg.ops()] == ["1.1.0"]
        reg.unload("acme_offset")
        assert reg.ops() == []
    assert sum(line.startswith("opforge-loader dlclose plugin=acme_offset") for line in lines) == 2


def test_cli_list_run_doctor_watch(third_party, tmp_path):
    build = third_party["1.0.0"]
    listing = cli("list", build).stdout
    assert re.search(r"acme_offset\s+1\.0\.0\s+opforge\s+acme::AddOffset\s+1\.0\s+Running\s+0", listing), listing
    as_json = json.loads(cli("list", build, "--json").stdout)
    assert as_json["ops"][0]["op"] == "acme::AddOffset" and as_json["refusals"] == []

    x = np.linspace(-1, 1, 5).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out = cli("run", "AddOffset", "--plugin-dir", build, "--input", tmp_path / "x.npy", "--attr", "offset=2",
              "--out", tmp_path / "y.npy").stdout
    assert "acme::AddOffset@1 (plugin version 1.0.0)" in out
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), x + 2)

    report = json.loads(cli("doctor", build / "libops_acme_offset.so.1", "--json", "--isolated").stdout)
    findings = {f["check"]: f["status"] for f in next(iter(report.values()))}
    assert findings["entry"] == findings["exports"] == findings["soname"] == findings["manifest"] == "ok", findings
    assert findings["isolated"] == "ok"


def _copy_plugin(build: Path, dest: Path) -> None:
    """Install like a deployment does: write aside, then rename over (new inode, atomic)."""
    for f in sorted(build.glob("libops_acme_offset.so.1*"), key=lambda p: p.name.endswith(".json")):
        if f.is_symlink():
            continue
        tmp = dest / (f.name + ".part")
        shutil.copy(f, tmp)
        os.replace(tmp, dest / f.name)


class LineReader:
    """stdout of a child, line by line, with a timeout (a reader thread feeds a queue)."""

    def __init__(self, proc):
        self.lines: list[str] = []
        self._queue: queue.Queue = queue.Queue()
        threading.Thread(target=lambda: [self._queue.put(line) for line in proc.stdout] and None, daemon=True).start()

    def wait_for(self, pattern: str, timeout: float = 60) -> None:
        """Return once a line (already seen or new) matches."""
        if any(re.search(pattern, line) for line in self.lines):
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self._queue.get(timeout=max(0.01, deadline - time.monotonic())).rstrip()
            except queue.Empty:
                break
            self.lines.append(line)
            if re.search(pattern, line):
                return
        raise AssertionError(f"no line matching {pattern!r} within {timeout}s; got:\n" + "\n".join(self.lines))


def _die_with_parent():
    """A killed test run (timeout, Ctrl-C twice) must not leave `watch` running forever."""
    import ctypes
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, 15)


def test_cli_watch_loads_reloads_and_unloads(third_party, tmp_path):
    watched = tmp_path / "watched"
    watched.mkdir(mode=0o755)
    _copy_plugin(third_party["1.0.0"], watched)
    proc = subprocess.Popen([*CLI, "watch", str(watched), "--interval", "0.1"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, preexec_fn=_die_with_parent)  # noqa: PLW1509  (only prctl: the death signal is set in the child)
    out = LineReader(proc)
    try:
        out.wait_for(r"op=acme::AddOffset@1 from=Initializing to=Running")
        out.wait_for(r"acme::AddOffset\s+1\.0\s+Running")  # the table after the change
        _copy_plugin(third_party["1.1.0"], watched)  # in place: same file names
        out.wait_for(r"^opforge-loader reload plugin=acme_offset version=1\.1\.0")
        out.wait_for(r"dlclose plugin=acme_offset version=1\.0\.0")
        for f in watched.iterdir():
            f.unlink()
        out.wait_for(r"dlclose plugin=acme_offset version=1\.1\.0")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
