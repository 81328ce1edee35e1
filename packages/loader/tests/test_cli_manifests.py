"""A bad neighbour manifest (valid JSON but not an object, `"ops": 5`, a FIFO, a link to /dev/zero)
gives one line naming the file and the problem in every CLI command, never a traceback or a hang,
and the good plugins beside it are still listed, diagnosed and served."""
from __future__ import annotations

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

import pytest

import opforge_loader
from opforge_loader import manifests

CLI = [sys.executable, "-m", "opforge_loader.cli"]
TIMEOUT = 30  # seconds; a FIFO or /dev/zero must never make a command wait for this
GOOD = "libops_example_scale.so.1"
BAD = "libbad.so.1"
NEW = "libops_opforge_nn.so.1"
ORT_MANIFEST = {"manifest_version": 1, "name": "bad_ort", "library": BAD, "version": "1.0.0", "kind": "onnxruntime",
                "api_version": 17, "sdk": {"min": "1.17", "max": None}, "ops": 5, "sha256": "0" * 64}

NEIGHBOURS = {
    # name: (how to make <dir>/libbad.so.1.manifest.json, what the Python reader says about it)
    "not_object": (lambda p: p.write_text("[1, 2]"), "malformed manifest: expected a JSON object, got array"),
    "ops_int": (lambda p: p.write_text(json.dumps(ORT_MANIFEST)),
                'malformed manifest: "ops": expected non-empty array of {domain, name, version}, got integer'),
    "fifo": (os.mkfifo, "not a regular file (a FIFO); only regular files are read"),
    "dev_zero": (lambda p: p.symlink_to("/dev/zero"), "not a regular file (a character device); only regular files are read"),
}


def install(src_dir: Path, name: str, dest: Path) -> Path:
    shutil.copy(src_dir / name, dest / name)
    shutil.copy(src_dir / (name + manifests.SUFFIX), dest / (name + manifests.SUFFIX))
    return dest / name


@pytest.fixture(params=sorted(NEIGHBOURS))
def neighbour(request, plugin_dir):
    """plugin_dir with the shipped Scale plugin and a bad neighbour manifest beside a real library."""
    install(Path(opforge_loader.plugin_dir()), GOOD, plugin_dir)
    shutil.copy(plugin_dir / GOOD, plugin_dir / BAD)  # a library, so doctor reaches the manifest
    make, problem = NEIGHBOURS[request.param]
    make(plugin_dir / (BAD + manifests.SUFFIX))
    return plugin_dir, problem


def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, timeout=TIMEOUT)


def lines_naming(text: str, name: str) -> list[str]:
    return [line for line in text.splitlines() if name in line]


def test_reader_refuses_each_neighbour_in_one_line(neighbour):
    directory, problem = neighbour
    path = directory / (BAD + manifests.SUFFIX)
    with pytest.raises(opforge_loader.ManifestError) as info:
        manifests.load(path)
    assert str(info.value) == f"opforge-loader: {path}: {problem}"
    with pytest.raises(opforge_loader.ManifestError, match=re.escape(problem)):
        opforge_loader.check_manifest(path)  # the Python check runs before the host reads anything


def test_reader_caps_the_size(plugin_dir):
    path = plugin_dir / (BAD + manifests.SUFFIX)
    path.write_text(json.dumps({"pad": " " * manifests.MAX_BYTES}))
    with pytest.raises(opforge_loader.ManifestError, match=f"larger than {manifests.MAX_BYTES} bytes"):
        manifests.load(path)


def test_list_shows_good_plugins_and_one_line_for_the_bad(neighbour):
    directory, _problem = neighbour
    result = cli("list", directory)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert "example::Scale" in result.stdout and "Running" in result.stdout, result.stdout
    assert len(lines_naming(result.stderr, BAD)) == 1, result.stderr
    as_json = json.loads(cli("list", directory, "--json").stdout)
    assert [row["op"] for row in as_json["ops"]] == ["example::Scale"]
    assert len([line for line in as_json["refusals"] if BAD in line]) == 1, as_json["refusals"]


def test_doctor_diagnoses_the_good_and_names_the_bad_manifest(neighbour):
    directory, problem = neighbour
    result = cli("doctor", directory, "--json")
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    report = json.loads(result.stdout)
    good = {f["check"]: f for f in report[str((directory / GOOD).resolve())]}
    bad = {f["check"]: f for f in report[str((directory / BAD).resolve())]}
    assert good["manifest"]["status"] == "ok" and good["entry"]["status"] == "ok"
    assert bad["manifest"]["status"] == "error"
    assert bad["manifest"]["message"].endswith(f"{BAD}{manifests.SUFFIX}: {problem}"), bad["manifest"]


class Lines:
    """A child's output, line by line, with timeouts (a reader thread feeds a queue)."""

    def __init__(self, proc: subprocess.Popen):
        self.seen: list[str] = []
        self._queue: queue.Queue = queue.Queue()
        threading.Thread(target=lambda: [self._queue.put(line.rstrip()) for line in proc.stdout], daemon=True).start()

    def drain(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                self.seen.append(self._queue.get(timeout=left))
            except queue.Empty:
                return

    def wait_for(self, fragment: str, since: int = 0, timeout: float = TIMEOUT) -> None:
        """Until a line from index `since` on contains fragment."""
        deadline = time.monotonic() + timeout
        while not any(fragment in line for line in self.seen[since:]):
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no line with {fragment!r} within {timeout}s; got:\n" + "\n".join(self.seen))
            try:
                self.seen.append(self._queue.get(timeout=left))
            except queue.Empty:
                pass

    def refusals(self, name: str, since: int = 0) -> list[str]:
        return [line for line in self.seen[since:] if "refuse" in line and name in line]


def _die_with_parent():
    """A killed test run must not leave `watch` running."""
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, 15)  # PR_SET_PDEATHSIG, SIGTERM


def test_watch_refuses_bad_manifests_once_and_keeps_serving(neighbour):
    directory, _problem = neighbour
    bad_manifest = directory / (BAD + manifests.SUFFIX)
    parked = directory.parent / "parked"  # the bad neighbour arrives while watch runs
    parked.mkdir()
    os.rename(bad_manifest, parked / bad_manifest.name)
    proc = subprocess.Popen([*CLI, "watch", str(directory), "--interval", "0.1"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, preexec_fn=_die_with_parent)  # noqa: PLW1509  (only prctl: the death signal is set in the child)
    out = Lines(proc)
    try:
        out.wait_for("op=example::Scale@1 from=Initializing to=Running")
        mark = len(out.seen)
        os.rename(parked / bad_manifest.name, bad_manifest)
        out.wait_for(BAD, since=mark)
        mark = len(out.seen)
        (directory / (GOOD + manifests.SUFFIX)).write_text("[]")  # a broken update of the running plugin
        out.wait_for(GOOD, since=mark)
        mark = len(out.seen)
        install(Path(opforge_loader.plugin_dir()), NEW, directory)  # a change: the table is printed again
        out.wait_for("op=opforge::Swish@1 from=Initializing to=Running", since=mark)
        out.wait_for("opforge::Swish ", since=mark)  # the table row, not the state line
        out.drain(1.5)  # ~15 more scans: a refusal is said once, not per scan
        log = "\n".join(out.seen)
        assert proc.poll() is None, log
        assert "Traceback" not in log and "dlclose" not in log and "to=Unregistering" not in log, log
        assert len(out.refusals(BAD)) == 1 and len(out.refusals(GOOD)) == 1, log
    finally:
        proc.terminate()
        proc.wait(timeout=TIMEOUT)


@pytest.mark.parametrize("raw, problem", [
    (b"[" * 200_000, "malformed manifest: nested too deeply"),
    (b"\xff{}", "malformed manifest: 'utf-8' codec can't decode byte 0xff"),
    (b'{"manifest_version": NaN}', "malformed manifest: NaN is not JSON"),
    (b'{"manifest_version": true}', 'malformed manifest: "manifest_version": expected integer, got boolean'),
    (b"", "malformed manifest: Expecting value: line 1 column 1"),
])
def test_reader_refuses_unparsable_bytes_in_one_line(plugin_dir, raw, problem):
    path = plugin_dir / (BAD + manifests.SUFFIX)
    path.write_bytes(raw)
    with pytest.raises(opforge_loader.ManifestError) as info:
        manifests.load(path)
    assert str(info.value).startswith(f"opforge-loader: {path}: {problem}"), str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("kind", ["onnxr\nuntime", "x\r\x1b[2Jy", "k\u2028" + "z" * 5000],
                         ids=["newline", "escape-sequence", "long"])
def test_refusal_is_one_printable_line_whatever_the_manifest_says(kind):
    """Values echoed from a manifest cannot forge a second line or flood the terminal (the
    manifest_py fuzz target found a raw newline in a refusal)."""
    raw = json.dumps({"manifest_version": 1, "name": "n", "library": "l", "version": "1",
                      "kind": kind, "api_version": 1, "sha256": "0" * 64, "sdk": {"min": "0.1"},
                      "ops": [{"domain": "d", "name": "o", "version": 1}]}).encode()
    with pytest.raises(opforge_loader.errors.ManifestError) as refused:
        manifests.parse("x.manifest.json", raw)
    message = str(refused.value)
    assert message.isprintable() and len(message) < 600, message
    assert '"kind"' in message
