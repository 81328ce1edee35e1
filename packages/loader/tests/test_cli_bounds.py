"""Plugin code a CLI command runs is bounded: each library is loaded in a child process first
(--timeout SECONDS per plugin), so a plugin that hangs or crashes in init is refused with one line
naming its file and the bound, and the other plugins are still listed, served and watched."""
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from plugin_build import build_c_plugin

import opforge_loader
from opforge_loader import doctor, manifests

CLI = [sys.executable, "-m", "opforge_loader.cli"]
SCALE = "libops_example_scale.so.1"
BOUND = 2  # the --timeout the tests pass, in seconds
LIMIT = 30  # far above what a bounded command needs: reaching it means the bound did not hold


def cli(*args) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    try:
        proc = subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, timeout=LIMIT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"opforge-loader {' '.join(map(str, args))} did not finish within {LIMIT}s")
    return proc, time.monotonic() - start


@pytest.fixture
def directory(plugin_dir: Path) -> Path:
    """plugin_dir holding the shipped Scale plugin."""
    for name in (SCALE, SCALE + manifests.SUFFIX):
        shutil.copy(Path(opforge_loader.plugin_dir()) / name, plugin_dir / name)
    return plugin_dir


def one_line_naming(text: str, library: Path) -> str:
    lines = [line for line in text.splitlines() if library.name in line]
    assert len(lines) == 1, text
    assert "Traceback" not in text, text
    return lines[0]


def test_list_refuses_a_plugin_whose_init_hangs_and_lists_the_others(directory):
    hang = build_c_plugin(directory, "libops_test_hang.so.1", name="hang", defines=("HANG_IN_INIT",))
    proc, took = cli("list", directory, "--timeout", BOUND)
    assert proc.returncode == 0, proc.stderr
    assert "example::Scale" in proc.stdout and "Running" in proc.stdout, proc.stdout
    line = one_line_naming(proc.stderr, hang)
    assert f"refuse file={hang} " in line and f"within {BOUND}s" in line and "stuck in init" in line, line
    assert "--timeout SECONDS" in line, line
    assert took < BOUND + 15, took


def test_list_survives_a_plugin_that_crashes_in_init(directory):
    crash = build_c_plugin(directory, "libops_test_crash.so.1", name="crash", defines=("CRASH_IN_INIT",))
    proc, _took = cli("list", directory, "--json")
    assert proc.returncode == 0, proc.stderr
    listing = json.loads(proc.stdout)
    assert [row["op"] for row in listing["ops"]] == ["example::Scale"]
    (line,) = [r for r in listing["refusals"] if crash.name in r]
    assert "crashed with SIGSEGV" in line, line


def test_run_serves_its_op_beside_a_hanging_plugin(directory, tmp_path):
    hang = build_c_plugin(directory, "libops_test_hang.so.1", name="hang", defines=("HANG_IN_INIT",))
    np.save(tmp_path / "x.npy", np.ones(3, np.float32))
    proc, _took = cli("run", "Scale", "--plugin-dir", directory, "--input", tmp_path / "x.npy", "--attr", "scale=2",
                      "--out", tmp_path / "y.npy", "--timeout", BOUND)
    assert proc.returncode == 0, proc.stderr
    assert np.load(tmp_path / "y.npy").tolist() == [2.0, 2.0, 2.0]
    assert f"within {BOUND}s" in one_line_naming(proc.stderr, hang)


def test_run_bounds_an_op_call_that_never_returns(plugin_dir, tmp_path):
    hang = build_c_plugin(plugin_dir, "libops_test_slow.so.1", name="slow", defines=("HANG_IN_COMPUTE",))
    np.save(tmp_path / "x.npy", np.ones(3, np.float32))
    proc, took = cli("run", "Offset", "--plugin-dir", plugin_dir, "--input", tmp_path / "x.npy", "--timeout", 1)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    line = one_line_naming(proc.stderr, hang)
    assert line.startswith("opforge-loader run: test::Offset@1 (plugin slow 1.0.0") and "within 1s" in line, line
    assert took < 1 + 15, took


def test_watch_refuses_a_hanging_plugin_once_and_keeps_the_others(directory):
    hang = build_c_plugin(directory, "libops_test_hang.so.1", name="hang", defines=("HANG_IN_INIT",))
    proc, _took = cli("watch", directory, "--iterations", 3, "--interval", 0.1, "--timeout", BOUND)
    assert proc.returncode == 0, proc.stderr
    assert "op=example::Scale@1 from=Initializing to=Running" in proc.stdout, proc.stdout
    refusals = [line for line in proc.stdout.splitlines() if "refuse" in line and hang.name in line]
    assert len(refusals) == 1 and f"within {BOUND}s" in refusals[0], proc.stdout


def test_doctor_isolated_gives_up_after_the_timeout(plugin_dir):
    hang = build_c_plugin(plugin_dir, "libops_test_hang.so.1", name="hang", defines=("HANG_IN_INIT",))
    proc, took = cli("doctor", hang, "--isolated", "--json", "--timeout", BOUND)
    assert proc.returncode == 1, proc.stderr
    (finding,) = [f for f in json.loads(proc.stdout)[str(hang)] if f["check"] == "isolated"]
    assert finding["status"] == "error" and str(hang) in finding["message"], finding
    assert f"within {BOUND}s" in finding["message"] and "--timeout SECONDS" in finding["message"], finding
    assert took < BOUND + 15, took


def test_the_default_bound_is_a_few_seconds_everywhere():
    from opforge_loader import isolation

    assert 1 <= isolation.DEFAULT_TIMEOUT <= 10
    assert doctor.diagnose.__kwdefaults__["timeout"] == isolation.DEFAULT_TIMEOUT
    from opforge_loader import cli as cli_module

    parser = cli_module.build_parser()
    for command in (["list", "d"], ["doctor", "d"], ["watch", "d"], ["run", "Op", "--input", "x", "--plugin-dir", "d"]):
        assert parser.parse_args(command).timeout == isolation.DEFAULT_TIMEOUT, command


@pytest.mark.parametrize("value", ["0", "nan", "soon"])
def test_a_bad_timeout_is_a_usage_error(directory, value):
    proc, _took = cli("list", directory, "--timeout", value)
    assert proc.returncode == 2 and "--timeout: expected a number of seconds > 0" in proc.stderr, proc.stderr
