"""A plugin hook calling back into the registry that runs it: init (and an unload run inside an
unload) hold the registry's writer lock, so load / unload of that registry from there are refused
with OPFORGE_ERR_REENTRANT and a message naming the call and the hook, never a deadlock; the
registry is left as it was. Each scenario runs in a child process: a deadlock fails the test by
its timeout instead of hanging the test run."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from plugin_build import build_c_plugin

import opforge_loader

SCALE = os.path.join(opforge_loader.plugin_dir(), "libops_example_scale.so.1")
REENTRANT = 8
DEADLOCK_TIMEOUT = 30


def scenario(plugin: Path, request: str, trace: Path, unload_after: bool) -> dict:
    """In a fresh process: load Scale, then `plugin` (whose hook makes `request`), optionally
    unload it again; returns what happened (see _drive)."""
    args = json.dumps({"plugin": str(plugin), "trace": str(trace), "unload_after": unload_after})
    env = dict(os.environ, OPFORGE_TEST_REENTER=request, OPFORGE_TEST_TRACE=str(trace))
    try:
        proc = subprocess.run([sys.executable, __file__, args], capture_output=True, text=True, env=env,
                              timeout=DEADLOCK_TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the re-entrant call {request!r} deadlocked the registry (no answer in {DEADLOCK_TIMEOUT}s)")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _drive(args: dict) -> None:
    import numpy as np

    reg = opforge_loader.Registry()
    os.environ["OPFORGE_TEST_REGISTRY"] = hex(reg._ptr)
    reg.load(SCALE)
    before = [(o.plugin, o.name, o.state) for o in reg.ops()]
    try:
        reg.load(args["plugin"])
        outer = "loaded"
    except opforge_loader.OpforgeError as e:
        outer = f"{e.status} {e}"
    after_load = [(o.plugin, o.name, o.state) for o in reg.ops()]
    if args["unload_after"]:
        reg.unload("reenter")
    trace = Path(args["trace"])
    print(json.dumps({"before": before, "outer": outer, "after_load": after_load,
                      "after": [(o.plugin, o.name, o.state) for o in reg.ops()],
                      "scale": reg.run("Scale", [np.ones(2, np.float32)], {"scale": 3.0}).tolist(),
                      "calls": trace.read_text().splitlines() if trace.exists() else []}))
    reg.close()


def reenter_plugin(plugin_dir: Path, *defines: str) -> Path:
    return build_c_plugin(plugin_dir, "libops_test_reenter.so.1", name="reenter", defines=defines)


def refused_call(line: str, function: str, hook: str) -> None:
    assert line.startswith(f"{function} {REENTRANT} opforge-loader: {function}: refused a re-entrant call from {hook}"), line
    assert "holds its writer lock" in line, line


def as_rows(rows):
    return [tuple(r) for r in rows]


def test_init_loading_into_its_registry_is_refused_and_its_own_load_completes(plugin_dir, tmp_path):
    other = build_c_plugin(plugin_dir, "libops_test_other.so.1", name="other", op="Other")
    plugin = reenter_plugin(plugin_dir, "REENTER_IN_INIT")
    result = scenario(plugin, f"opforge_registry_load {other}", tmp_path / "trace", unload_after=False)
    (call,) = result["calls"]
    refused_call(call, "opforge_registry_load", "the init hook of plugin reenter 1.0.0")
    assert result["outer"] == "loaded"
    assert as_rows(result["after"]) == sorted(as_rows(result["before"]) + [("reenter", "Offset", "Running")])
    assert result["scale"] == [3.0, 3.0]


def test_init_failing_with_the_refusal_leaves_the_registry_unchanged(plugin_dir, tmp_path):
    plugin = reenter_plugin(plugin_dir, "REENTER_IN_INIT", "REENTER_FAILS_INIT")
    result = scenario(plugin, "opforge_registry_unload example_scale", tmp_path / "trace", unload_after=False)
    (call,) = result["calls"]
    refused_call(call, "opforge_registry_unload", "the init hook of plugin reenter 1.0.0")
    status, message = result["outer"].split(" ", 1)
    assert int(status) == 7 and f"refused {plugin}: init failed (status {REENTRANT}): " in message, message
    assert "opforge_registry_unload: refused a re-entrant call" in message and "\n" not in message
    assert result["after"] == result["before"] and result["scale"] == [3.0, 3.0]


def test_unload_hook_loading_into_its_registry_is_refused(plugin_dir, tmp_path):
    other = build_c_plugin(plugin_dir, "libops_test_other.so.1", name="other", op="Other")
    plugin = reenter_plugin(plugin_dir, "REENTER_IN_UNLOAD")
    result = scenario(plugin, f"opforge_registry_load {other}", tmp_path / "trace", unload_after=True)
    (call,) = result["calls"]
    refused_call(call, "opforge_registry_load", "the unload hook of plugin reenter 1.0.0")
    assert ["reenter", "Offset", "Running"] in result["after_load"]
    assert result["after"] == result["before"] and result["scale"] == [3.0, 3.0]


if __name__ == "__main__":
    _drive(json.loads(sys.argv[1]))
