"""The runner (`python -m fuzz`): discovery, builds that redo only what changed, skips with their
reason, crashes reported with the saved input and a replay command that reproduces it."""
from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support import PLANTED, run, tail

from fuzz import runner

# The runs below link the shared engine object: built once, under a lock, before them.
pytestmark = pytest.mark.usefixtures("engine_object")

NO_EXTRA_INPUTS = "def compile_inputs(repo):\n    return {'sources': []}\n"


def make_target(root: Path, name: str, *, cpp: str | None = None, build_py: str | None = None,
                python: str | None = None, seeds: dict[str, bytes] | None = None) -> Path:
    folder = root / name
    (folder / "corpus").mkdir(parents=True)
    if cpp:
        shutil.copy(PLANTED / cpp, folder / "target.cpp")
    if build_py is not None:
        (folder / "build.py").write_text(build_py)
    if python:
        shutil.copy(PLANTED / python / "target.py", folder / "target.py")
    for seed, data in (seeds or {"empty": b""}).items():
        (folder / "corpus" / seed).write_bytes(data)
    return folder


def fuzz_main(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", "fuzz", "--targets-dir", tmp_path / "targets",
                "--build-dir", tmp_path / "build", "--seed", "1", *args], timeout=300)


def report(tmp_path: Path) -> dict[str, dict]:
    data = json.loads((tmp_path / "build" / "report.json").read_text())
    return {t["name"]: t for t in data["targets"]}


def test_unavailable_parts_are_skipped_with_their_reason_never_passed(tmp_path):
    targets = tmp_path / "targets"
    make_target(targets, "needs_trt", cpp="trivial.cpp", build_py=textwrap.dedent("""\
        from fuzz import Unavailable
        def compile_inputs(repo):
            raise Unavailable("no TensorRT headers here")
        """))
    make_target(targets, "old_style", cpp="trivial.cpp", build_py=(
        "def compile_inputs(repo):\n    raise RuntimeError('unavailable: no toolkit')\n"))
    done = fuzz_main(tmp_path, "--seconds", "1")
    assert done.returncode == 0, tail(done)
    assert "skip  needs_trt  skipped: no TensorRT headers here" in done.stdout
    assert "0 passed, 0 failed, 2 skipped" in done.stdout
    assert report(tmp_path)["old_style"]["status"] == "skipped: no toolkit"


def test_a_bad_build_py_fails_naming_the_file_and_the_key(tmp_path):
    make_target(tmp_path / "targets", "bad", cpp="trivial.cpp",
                build_py="def compile_inputs(repo):\n    return {'sources': 'a.cpp'}\n")
    done = fuzz_main(tmp_path, "--seconds", "1")
    assert done.returncode == 1, tail(done)
    assert "FAIL  bad" in done.stdout
    assert "bad/build.py: sources: expected a list" in done.stdout


def test_crash_exits_nonzero_with_the_input_and_a_replay_that_reproduces(tmp_path):
    targets = tmp_path / "targets"
    make_target(targets, "planted", cpp="magic_ubsan.cpp", build_py=NO_EXTRA_INPUTS)
    make_target(targets, "clean", cpp="trivial.cpp", build_py=NO_EXTRA_INPUTS,
                seeds={"one": b"1", "two": b"22"})
    done = fuzz_main(tmp_path, "--seconds", "3", "--jobs", "2")
    assert done.returncode == 1, tail(done)
    results = report(tmp_path)
    assert results["clean"]["status"] == "pass" and results["clean"]["execs"] > 2
    crash = results["planted"]
    assert crash["status"] == "crash" and "signed integer overflow" in crash["report"]
    assert f"input:  {crash['artifact']}" in done.stdout
    assert f"replay: {crash['replay']}" in done.stdout
    replay = run(shlex.split(crash["replay"]))
    assert replay.returncode != 0 and "signed integer overflow" in replay.stdout, tail(replay)


def test_new_inputs_stay_in_the_build_folder(tmp_path):
    targets = tmp_path / "targets"
    make_target(targets, "nested", cpp="nested_branches.cpp", build_py=NO_EXTRA_INPUTS,
                seeds={"eight": b"xxxxxxxx"})
    done = fuzz_main(tmp_path, "--seconds", "2", "nested")
    assert done.returncode in (0, 1), tail(done)  # it may well find the planted abort()
    assert [p.name for p in (targets / "nested" / "corpus").iterdir()] == ["eight"]
    assert any((tmp_path / "build" / "nested" / "corpus").iterdir())


def test_unknown_target_names_the_ones_that_exist(tmp_path):
    make_target(tmp_path / "targets", "real", cpp="trivial.cpp", build_py=NO_EXTRA_INPUTS)
    done = fuzz_main(tmp_path, "nope")
    assert done.returncode == 2 and "no fuzz target nope (fuzz/targets/ has: real)" in done.stdout


def test_rebuilds_only_when_an_input_changes(tmp_path):
    source = tmp_path / "target.cpp"
    header = tmp_path / "value.h"
    header.write_text("#define VALUE 1\n")
    source.write_text('#include "value.h"\nint g_value = VALUE;\n' +
                      (PLANTED / "trivial.cpp").read_text())
    out = tmp_path / "build"

    def build_times() -> tuple[int, int]:
        exe = runner.build_fuzzer(out, [source], include_dirs=[str(tmp_path)])
        obj = next((out / "obj").glob("*.o"))
        return obj.stat().st_mtime_ns, exe.stat().st_mtime_ns

    first = build_times()
    assert build_times() == first
    header.write_text("#define VALUE 2\n")
    second = build_times()
    assert second[0] != first[0] and second[1] != first[1]


def test_a_quick_run_builds_at_o0_and_the_hooks_do_not_reenter_the_target(tmp_path):
    make_target(tmp_path / "targets", "inline", cpp="shared_inline.cpp", build_py=NO_EXTRA_INPUTS)
    done = fuzz_main(tmp_path, "--seconds", "1")
    assert runner.opt_level(1) == "-O0" and runner.opt_level(300) == "-O1"
    assert done.returncode == 0, tail(done)
    assert report(tmp_path)["inline"]["status"] == "pass"


def test_python_target_crash_is_found_under_atheris(tmp_path):
    pytest.importorskip("atheris", reason=runner.ATHERIS_HINT)
    make_target(tmp_path / "targets", "py", python="py_magic", seeds={"short": b"OP"})
    done = fuzz_main(tmp_path, "--seconds", "30")
    assert done.returncode == 1, tail(done)
    crash = report(tmp_path)["py"]
    assert crash["status"] == "crash" and crash["report"].startswith("KeyError"), crash
    replay = run(shlex.split(crash["replay"]))
    assert replay.returncode != 0 and "KeyError" in replay.stdout, tail(replay)
