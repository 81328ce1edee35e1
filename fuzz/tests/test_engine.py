"""driver.cpp, the coverage-guided engine: it finds planted bugs, saves inputs that reproduce
them, and its coverage feedback beats blind mutation."""
from __future__ import annotations

import platform
import time
from pathlib import Path

from support import run, tail

from fuzz import runner


def fuzz(exe: Path, tmp: Path, *flags: str, seeds: dict[str, bytes] | None = None):
    """Fuzzes with a fixed seed; new inputs go to tmp/out, crashes to tmp/."""
    (tmp / "out").mkdir(parents=True, exist_ok=True)
    (tmp / "seeds").mkdir(exist_ok=True)
    for name, data in (seeds or {}).items():
        (tmp / "seeds" / name).write_bytes(data)
    # without address randomization: the comparisons libFuzzer learns from are keyed by code address,
    # so under ASLR one seed is not one run (seed 1 missed magic_overflow's magic in 1 run of 16)
    fixed = ["setarch", platform.machine(), "--addr-no-randomize"]
    done = run([*fixed, exe, "-seed=1", f"-artifact_prefix={tmp}/", *flags, tmp / "out",
                tmp / "seeds"])
    return done, runner.parse_output(done.stdout)


def assert_found_and_replayed(planted, tmp_path: Path, name: str, report: str) -> None:
    exe = planted(name)
    started = time.monotonic()
    done, found = fuzz(exe, tmp_path, "-max_total_time=60", seeds={"short": b"0123456789"})
    elapsed = time.monotonic() - started
    assert done.returncode == 77 and "artifact" in found, tail(done)
    assert report in done.stdout, tail(done)
    assert elapsed < 30, f"{name}: found only after {elapsed:.0f} s"
    artifact = Path(found["artifact"])
    assert artifact.parent == tmp_path and artifact.name.startswith("crash-")
    replay = run([exe, artifact])
    assert replay.returncode == 77 and report in replay.stdout, tail(replay)


def test_finds_heap_overflow_behind_a_magic_and_saves_a_reproducer(planted, tmp_path):
    assert_found_and_replayed(planted, tmp_path, "magic_overflow",
                              "AddressSanitizer: heap-buffer-overflow")


def test_finds_ubsan_report_behind_a_magic_and_saves_a_reproducer(planted, tmp_path):
    assert_found_and_replayed(planted, tmp_path, "magic_ubsan", "runtime error: signed integer "
                              "overflow")


def test_coverage_guidance_beats_blind_mutation(planted, tmp_path):
    """Eight nested one-byte branches; comparison feedback off, so only coverage guides."""
    exe = planted("nested_branches")
    seeds = {"eight_bytes": b"xxxxxxxx"}
    guided, guided_found = fuzz(exe, tmp_path / "guided", "-runs=600000", "-use_cmp=0",
                                seeds=seeds)
    blind, blind_found = fuzz(exe, tmp_path / "blind", "-runs=600000", "-use_coverage=0",
                              seeds=seeds)
    assert guided.returncode == 77 and "deadly signal 6" in guided.stdout, tail(guided)
    assert blind.returncode == 0, tail(blind)
    assert blind_found["execs"] == 600000
    assert blind_found["cov"] < guided_found["cov"], (blind_found, guided_found)


def test_hang_is_saved_as_timeout(planted, tmp_path):
    exe = planted("hang_and_leak")
    # -use_cmp=0: the comparison hooks would offer "LEAK" as one mutation too, and which of the two
    # planted bugs comes first would depend on the run; without them HANG is 1 byte away, LEAK 4
    done, found = fuzz(exe, tmp_path, "-timeout=1", "-max_total_time=60", "-use_cmp=0",
                       seeds={"x": b"HANX"})
    assert done.returncode == 70, tail(done)
    assert Path(found["artifact"]).name.startswith("timeout-")
    assert Path(found["artifact"]).read_bytes().startswith(b"HANG")
    assert "ERROR: timeout" in found["report"]


def test_leak_is_saved_and_named(planted, tmp_path):
    exe = planted("hang_and_leak")
    done, found = fuzz(exe, tmp_path, "-max_total_time=60", "-use_cmp=0", seeds={"x": b"LEAX"})
    assert done.returncode == 77, tail(done)
    assert Path(found["artifact"]).name.startswith("leak-")
    assert "detected memory leaks" in done.stdout and "hang_and_leak.cpp" in done.stdout


def test_replaying_good_inputs_runs_each_once(planted, tmp_path):
    exe = planted("nested_branches")
    inputs = [tmp_path / "a", tmp_path / "b"]
    for path in inputs:
        path.write_bytes(b"opforgX!")
    done = run([exe, *inputs])
    assert done.returncode == 0, tail(done)
    assert done.stdout.count("no report") == 2


def test_new_inputs_go_to_the_first_dir_and_respect_max_len(planted, tmp_path):
    exe = planted("nested_branches")
    done, found = fuzz(exe, tmp_path, "-runs=20000", "-max_len=12", "-use_cmp=0",
                       seeds={"seed": b"op"})
    assert done.returncode == 0, tail(done)
    written = list((tmp_path / "out").iterdir())
    assert written and len(written) == found["corpus"] - 1  # the seed stays where it was
    assert max(p.stat().st_size for p in written) <= 12
    assert [p.name for p in (tmp_path / "seeds").iterdir()] == ["seed"]


def test_engine_speed_on_a_trivial_target(planted, tmp_path, record_property):
    done, found = fuzz(planted("trivial"), tmp_path, "-max_total_time=3")
    assert done.returncode == 0, tail(done)
    record_property("exec_per_s", found["exec_per_s"])
    print(f"engine: {found['exec_per_s']} exec/s on a trivial target")
    assert found["exec_per_s"] > 2000, "the engine's own cost per input grew pathologically"
