"""Plugin code run in a child process with a deadline. `doctor --isolated` reports what the child
saw; `list`, `run` and `watch` give the registry an admit callback that runs each library there
before the host loads it, so a plugin that hangs or crashes in a static constructor, its entry or
init is refused with one line instead of hanging or killing the command."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

DEFAULT_TIMEOUT = 5.0  # seconds per plugin; a plugin's init should take milliseconds
TIMEOUT_FLAG = "--timeout SECONDS"
_CHILD = Path(__file__).resolve().with_name("_probe.py")


@dataclass(frozen=True)
class Probe:
    outcome: str      # ok | failed (the child said why) | crashed (a signal) | timeout
    phase: str        # the last phase the child reached: dlopen, loaded, entry ..., init ok, ...
    detail: str = ""  # failed: the child's last line on stderr; crashed: the signal's name


def run_isolated(path: str, kind: str | None, timeout: float, max_api: int | None = None) -> Probe:
    """Loads path in a child (entry, init and unload for kind opforge), killed after timeout
    seconds. Output goes to files, not pipes: a grandchild keeping a pipe open cannot make the
    wait outlast the deadline."""
    cmd = [sys.executable, "-I", str(_CHILD), path, kind or ""] + ([str(max_api)] if max_api else [])
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        child = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True)
        try:
            code = child.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(child)
            return Probe("timeout", _last_line(out, "start"))
        phase = _last_line(out, "start")
        if code < 0:
            return Probe("crashed", phase, _signal_name(-code))
        if code != 0:
            return Probe("failed", phase, _last_line(err, ""))
        return Probe("ok", phase)


def _kill_group(child: subprocess.Popen) -> None:
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    child.wait()


def _last_line(f, default: str) -> str:
    f.seek(0)
    lines = f.read().decode(errors="replace").strip().splitlines()
    return lines[-1] if lines else default


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _stuck_in(phase: str) -> str:
    if phase.startswith("entry"):
        return "init"
    return {"start": "the child's start", "dlopen": "dlopen (a static constructor)",
            "loaded": "opforge_plugin_entry", "init ok": "unload"}.get(phase, f"the step after {phase}")


def hang_text(probe: Probe, timeout: float) -> str:
    return (f"did not finish loading within {timeout:g}s in a child process: stuck in {_stuck_in(probe.phase)} "
            f"(last phase '{probe.phase}'); {TIMEOUT_FLAG} changes the bound")


def crash_text(probe: Probe) -> str:
    return f"child process crashed with {probe.detail} after phase '{probe.phase}'"


def admit_in_child(timeout: float, max_api: int | None = None) -> Callable[[str], str | None]:
    """A Registry admit callback: a library that hangs or crashes in the child is refused (the
    reason names the timeout or the signal); anything else is left to the host's own checks."""

    def admit(library: str) -> str | None:
        probe = run_isolated(library, "opforge", timeout, max_api)
        if probe.outcome == "timeout":
            return hang_text(probe, timeout)
        if probe.outcome == "crashed":
            return f"{crash_text(probe)} (loading it here would take this process down)"
        return None

    return admit
