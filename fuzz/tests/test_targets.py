"""Every real target under fuzz/targets/ replays its corpus and fuzzes for a bounded time
(OPFORGE_FUZZ_SECONDS, default 5 s) under ASan/UBSan with no report, or is skipped with the
reason its build.py gave. `nox -s fuzz` runs them longer."""
from __future__ import annotations

import importlib.util
import os
import re

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
    done = run_once("fuzz_targets", lambda _: runner.run_all(TARGETS, seconds, jobs=2, seed=1))  # CI: 2 cores
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


def _trt_fields_seeds():
    path = runner.TARGETS / "trt_fields" / "seeds.py"
    spec = importlib.util.spec_from_file_location("trt_fields_seeds", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_trt_fields_can_name_every_attribute_of_the_spec():
    """trt_fields runs every op's creator (kOps) on each input; the field names an input selects
    (kNames in target.cpp, mirrored by seeds.py's NAMES) include every attribute of every op of the
    spec, so each op gets its own fields, not only unknown ones."""
    opforge_spec = pytest.importorskip("opforge_spec", reason="pip install ./kernels (the op spec)")
    text = (runner.TARGETS / "trt_fields" / "target.cpp").read_text()
    listed = re.search(r"kNames\[\] = \{(.*?)\};", text, re.S).group(1)
    names = [None if n.strip() == "nullptr" else n.strip().strip('"') for n in listed.split(",")]
    seeds = _trt_fields_seeds()
    assert names == sorted(seeds.NAMES, key=seeds.NAMES.get), "seeds.py NAMES must mirror target.cpp kNames"
    assert seeds.CUSTOM == len(names)
    attributes = {name for op in opforge_spec.OPS.values() for name in op.attributes}
    assert attributes <= set(names), f"kNames lacks {sorted(attributes - set(names))}"
