"""The timing loop's budget: slow calls stop after MIN_RUNS samples, fast ones take `repeat`."""
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from opforge_bench import timing


def test_a_slow_group_stops_at_the_budget_with_min_runs_each():
    started = time.perf_counter()
    found = timing.measure_interleaved({"a": lambda: time.sleep(0.02), "b": lambda: time.sleep(0.02)},
                                       repeat=100, budget_s=0.1)
    assert [t.runs for t in found.values()] == [timing.MIN_RUNS] * 2
    assert time.perf_counter() - started < 2  # 100 rounds would take 4 s and more


def test_a_fast_group_takes_every_asked_run_within_the_budget():
    found = timing.measure_interleaved({"a": lambda: None}, repeat=30, budget_s=10)
    assert found["a"].runs == 30
