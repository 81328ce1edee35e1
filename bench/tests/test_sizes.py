"""The sweep is sized by memory as well as by cache (a full run once reached 268M elements on a
23 GB machine and was OOM-killed)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from opforge_bench import timing

GIB = 1 << 30


def test_the_machine_that_ran_out_of_memory_gets_a_sweep_that_fits():
    sizes = timing.sizes(quick=False, llc=300 << 20, memory=23 * GIB)
    assert max(sizes) < 268_435_456
    assert 4 * max(sizes) * timing.ARRAYS_ALIVE <= timing.MEMORY_SHARE * 23 * GIB
    assert max(sizes) >= 1 << 24  # still the 16M elements the targets are stated at


def test_small_memory_shrinks_the_sweep_and_quick_runs():
    assert max(timing.sizes(quick=False, llc=32 << 20, memory=2 * GIB)) * 4 * timing.ARRAYS_ALIVE <= GIB
    assert max(timing.sizes(quick=True, llc=32 << 20, memory=GIB)) < 1 << 24


def test_large_memory_keeps_the_cache_bound():
    assert max(timing.sizes(quick=False, llc=32 << 20, memory=512 * GIB)) == 1 << 24
