"""Every real target under fuzz/targets/ replays its corpus and fuzzes for a bounded time
(OPFORGE_FUZZ_SECONDS, default 5 s) under ASan/UBSan with no report, or is skipped with the
reason its build.py gave. `nox -s fuzz` runs them longer."""
from __future__ import annotations

import os

import pytest

from fuzz import runner

# The readers of outside bytes (issue "Trust"): each must have a target here.
READERS = ("manifest", "manifest_py", "trt_fields", "matrix_yaml", "elf_dynamic")
TARGETS = runner.discover()
SEED_LIMIT = 4096


@pytest.fixture(scope="module")
def results(run_once, engine_object) -> dict[str, runner.Result]:
    """Every target fuzzed once per test run, however many pytest-xdist workers ask: they share
    build/fuzz/<target>."""
    seconds = int(os.environ.get("OPFORGE_FUZZ_SECONDS", "5"))
    done = run_once("fuzz_targets", lambda _: runner.run_all(TARGETS, seconds, jobs=2))  # CI: 2 cores
    return {r.name: r for r in done}


def test_every_reader_of_outside_bytes_has_a_target():
    missing = sorted(set(READERS) - {t.name for t in TARGETS})
    assert not missing, f"fuzz/targets/ lacks {', '.join(missing)}"


@pytest.mark.parametrize("target", TARGETS, ids=[t.name for t in TARGETS])
def test_corpus_is_small_and_named(target):
    seeds = sorted(p for p in target.corpus.iterdir()) if target.corpus.is_dir() else []
    assert 5 <= len(seeds) <= 40, f"{target.corpus}: {len(seeds)} seeds, expected 5 to 40"
    big = [f"{p.name} ({p.stat().st_size} bytes)" for p in seeds if p.stat().st_size >= SEED_LIMIT]
    assert not big, f"{target.corpus}: seeds of {SEED_LIMIT} bytes or more: {', '.join(big)}"


@pytest.mark.parametrize("target", TARGETS, ids=[t.name for t in TARGETS])
def test_fuzzes_without_a_report(target, results):
    result = results[target.name]
    if result.status.startswith("skipped"):
        pytest.skip(f"{target.name}: {result.status}")
    assert result.status == "pass", "\n".join(runner.summary_lines(result))
    seeds = len(list(target.corpus.iterdir())) if target.corpus.is_dir() else 0
    assert result.execs > seeds, f"{target.name}: {result.execs} execs for {seeds} seeds"
