"""The CLI's admission child (issue 28, items 6-10): it loads the very bytes the host hashed, nothing
a plugin starts outlives the command, what is read from the child is bounded, --timeout is one the
platform can wait for, and many plugins share a child while the host holds no descriptor per plugin."""
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from plugin_build import build_c_plugin, clone_plugins

import opforge_loader
from opforge_loader import isolation

CLI = [sys.executable, "-m", "opforge_loader.cli"]
LIMIT = 120  # far above what any of these commands needs


def cli(*args, **kwargs) -> subprocess.CompletedProcess:
    kwargs.setdefault("capture_output", True)
    return subprocess.run([*CLI, *map(str, args)], text=True, timeout=LIMIT, **kwargs)


def test_the_child_runs_the_bytes_the_host_hashed_not_a_file_swapped_in_between(plugin_dir, tmp_path, monkeypatch):
    trace = tmp_path / "trace.txt"
    monkeypatch.setenv("OPFORGE_TEST_TRACE", str(trace))
    lib = build_c_plugin(plugin_dir, "libops_test_offset.so.1", offset=1.0, defines=("TRACE",))
    swapped = build_c_plugin(tmp_path / "other", "libops_test_offset.so.1", offset=666.0, defines=("TRACE",),
                             manifest=False)
    admit = isolation.admit_in_child(isolation.DEFAULT_TIMEOUT, 1)

    def swap_then_admit(candidates):
        shutil.copy(swapped, lib.with_name("swap.part"))
        os.replace(lib.with_name("swap.part"), lib)  # after the host hashed the file, before the child
        return admit(candidates)

    with opforge_loader.Registry(admit=swap_then_admit, log=lambda level, line: None) as reg:
        reg.load(lib)
        x = np.zeros(2, np.float32)
        assert reg.run("Offset", [x]).tolist() == [1.0, 1.0]  # the host mapped what it hashed
    events = [line.split()[:3] for line in trace.read_text().splitlines()]
    assert ["ctor", "1.0.0", "666"] not in events, events  # the swapped library never ran, not even in the child
    assert events.count(["ctor", "1.0.0", "1"]) == 2, events  # once in the child, once here


def _alive(pids: list[int]) -> list[int]:
    deadline = time.monotonic() + 5  # SIGKILL is asynchronous
    while True:
        alive = [pid for pid in pids if Path(f"/proc/{pid}").exists() and not _zombie(pid)]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def _pids(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


@pytest.mark.parametrize("define", ["FORK_IN_INIT", "DAEMONIZE_IN_INIT"])
def test_nothing_a_plugin_starts_outlives_a_successful_list(plugin_dir, tmp_path, define):
    pids = tmp_path / "pids.txt"
    build_c_plugin(plugin_dir, "libops_test_linger.so.1", name="linger", defines=(define,))
    proc = cli("list", plugin_dir, "--json", env=dict(os.environ, OPFORGE_TEST_PIDS=str(pids)))
    assert proc.returncode == 0, proc.stderr
    assert [row["op"] for row in json.loads(proc.stdout)["ops"]] == ["test::Offset"], proc.stdout
    started = _pids(pids)
    assert len(started) == 2, started  # one in the admission child, one in the command itself
    assert _alive(started) == [], f"{define}: processes left behind: {started}"


def test_a_daemon_started_before_a_hang_dies_with_the_timed_out_child(plugin_dir, tmp_path):
    pids = tmp_path / "pids.txt"
    hang = build_c_plugin(plugin_dir, "libops_test_hang.so.1", name="hang", defines=("DAEMONIZE_IN_INIT", "HANG_IN_INIT"))
    proc = cli("list", plugin_dir, "--timeout", 1, env=dict(os.environ, OPFORGE_TEST_PIDS=str(pids)))
    assert proc.returncode == 0 and f"refuse file={hang}" in proc.stderr and "within 1s" in proc.stderr, proc.stderr
    started = _pids(pids)
    assert len(started) == 1, started
    assert _alive(started) == [], f"the setsid daemon {started} survived the timeout"


def _max_rss_mib_of(command: list[str]) -> tuple[int, float]:
    """Exit status and peak RSS (MiB) of command, run with its stdout discarded."""
    script = ("import resource, subprocess, sys\n"
              "code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode\n"
              "print(code, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)\n")
    out = subprocess.run([sys.executable, "-c", script, *command], capture_output=True, text=True, timeout=LIMIT)
    code, rss = out.stdout.split()
    return int(code), float(rss)


def test_a_plugin_flooding_stdout_costs_the_command_no_memory(plugin_dir):
    build_c_plugin(plugin_dir, "libops_test_flood.so.1", name="flood", defines=("FLOOD_MIB=128",))
    code, rss_mib = _max_rss_mib_of([*CLI, "list", str(plugin_dir)])
    assert code == 0
    assert rss_mib < 100, f"{rss_mib:.0f} MiB for a plugin printing 128 MiB"


@pytest.mark.parametrize("command", [["list", "{dir}"], ["run", "Offset", "--plugin-dir", "{dir}", "--input", "{x}"]])
def test_a_timeout_beyond_what_the_platform_can_wait_is_one_usage_line(plugin_dir, tmp_path, command):
    build_c_plugin(plugin_dir, "libops_test_offset.so.1")
    np.save(tmp_path / "x.npy", np.ones(2, np.float32))
    args = [a.format(dir=plugin_dir, x=tmp_path / "x.npy") for a in command]
    proc = cli(*args, "--timeout", "1e10")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "--timeout" in proc.stderr and "at most 9223372036" in proc.stderr, proc.stderr


def test_run_accepts_the_longest_timeout_the_platform_can_wait(plugin_dir, tmp_path):
    build_c_plugin(plugin_dir, "libops_test_offset.so.1")
    np.save(tmp_path / "x.npy", np.ones(2, np.float32))
    proc = cli("run", "Offset", "--plugin-dir", plugin_dir, "--input", tmp_path / "x.npy", "--timeout", "9.2e9")
    assert proc.returncode == 0 and "output 0: float32 [2]" in proc.stdout, proc.stderr


COUNT = 300  # several admission batches (64), and more plugins than the descriptor limit below


@pytest.fixture(scope="module")
def many_plugins(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("many")
    os.chmod(root, 0o755)
    directory = root / "plugins"
    directory.mkdir(mode=0o755)
    clone_plugins(directory, COUNT)
    return directory


def counting_admission(batches: list[int]):
    """The real admission child, recording how many plugins each call hands it."""
    admit = isolation.admit_in_child(isolation.DEFAULT_TIMEOUT, 1)

    def counted(candidates):
        batches.append(len(candidates))
        return admit(candidates)
    return counted


BATCHES = [64] * (COUNT // 64) + [COUNT % 64]


def test_load_dir_admits_plugins_in_batches(many_plugins):
    batches: list[int] = []
    with opforge_loader.Registry(admit=counting_admission(batches), log=lambda level, line: None) as reg:
        assert reg.load_dir(many_plugins) == (COUNT, 0)
    assert batches == BATCHES, batches


def test_a_watch_step_admits_new_plugins_in_batches(many_plugins):
    batches: list[int] = []
    with opforge_loader.Registry(admit=counting_admission(batches), log=lambda level, line: None) as reg:
        assert reg.sync(many_plugins) == COUNT
        assert reg.sync(many_plugins) == 0
    assert batches == BATCHES, batches


def _fewer_descriptors(limit: int):
    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))


def test_list_loads_more_plugins_than_the_descriptor_limit(many_plugins):
    proc = subprocess.run([*CLI, "list", str(many_plugins), "--json"], capture_output=True, text=True, timeout=LIMIT,
                          preexec_fn=_fewer_descriptors(160))
    assert proc.returncode == 0, proc.stderr[-2000:]
    listing = json.loads(proc.stdout)
    assert listing["refusals"] == [] and len(listing["ops"]) == COUNT, listing["refusals"][:3]


def test_a_crash_in_a_batch_is_blamed_on_its_plugin_alone(plugin_dir):
    clone_plugins(plugin_dir, 5)
    crash = build_c_plugin(plugin_dir, "libops_gen_00002x.so.1", name="crash", op="Crash", defines=("CRASH_IN_INIT",))
    hang = build_c_plugin(plugin_dir, "libops_gen_00003x.so.1", name="hang", op="Hang", defines=("HANG_IN_INIT",))
    proc = cli("list", plugin_dir, "--json", "--timeout", 1)
    assert proc.returncode == 0, proc.stderr
    listing = json.loads(proc.stdout)
    assert sorted(row["op"] for row in listing["ops"]) == [f"test::GenOp{i:05d}" for i in range(5)]
    assert len(listing["refusals"]) == 2, listing["refusals"]
    (crashed,) = [r for r in listing["refusals"] if crash.name in r]
    (hung,) = [r for r in listing["refusals"] if hang.name in r]
    assert "crashed with SIGSEGV" in crashed and "within 1s" in hung, listing["refusals"]
