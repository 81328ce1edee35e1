"""Plugin code run in a child process with a deadline. `doctor --isolated` reports what the child
saw; `list`, `run` and `watch` give the registry an admit callback that runs each library there
before the host loads it, so a plugin that hangs or crashes in a static constructor, its entry or
init is refused with one line instead of hanging or killing the command.

The child (_probe.py) loads a batch of libraries one after the other and reports each step on a
pipe; its output goes to /dev/null and what is read from the pipe is bounded, so a plugin that
floods stdout costs nothing here. A crash or a hang is blamed on the library it happened in, and
a verdict of that kind is kept only for the first library of a child (one that ran after nothing
else); otherwise that library opens the next child. Whatever the plugins start (forks, setsid
daemons) is killed by the child's supervisor before it exits (PR_SET_CHILD_SUBREAPER)."""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

DEFAULT_TIMEOUT = 5.0  # seconds per plugin; a plugin's init should take milliseconds
TIMEOUT_FLAG = "--timeout SECONDS"
_CHILD = Path(__file__).resolve().with_name("_probe.py")
_MAX_PENDING = 8192  # bytes of an unfinished status line kept (the child writes < 2,001)
_POLL = 0.5          # seconds between checks that the child is still there
_GRACE = 5.0         # seconds the child's supervisor gets to clean up after SIGTERM


@dataclass(frozen=True)
class Candidate:
    """A library to load in the child: the real file (for messages) and, from the host, the sealed
    memfd holding exactly the bytes it hashed (what the child loads), and its $ORIGIN dependencies."""

    library: str
    image_fd: int | None = None
    dependencies: tuple[str, ...] = ()

    @property
    def target(self) -> str:
        return self.library if self.image_fd is None else f"/proc/self/fd/{self.image_fd}"


@dataclass(frozen=True)
class Probe:
    outcome: str      # ok | failed (the child said why) | crashed (a signal or an exit) | timeout
    phase: str        # the last phase the child reached: dlopen, loaded, entry ..., init ok, ...
    detail: str = ""  # failed: the child's message; crashed: the signal's name or "exit status N"


class _Child:
    """What one child reported: per library its last phase and, when it finished, its probe."""

    def __init__(self, count: int):
        self.phases = ["start"] * count
        self.done: list[Probe | None] = [None] * count
        self.current: int | None = None
        self.exit: int | None = None
        self._pending = b""

    def feed(self, chunk: bytes) -> bool:
        """Takes bytes from the pipe; True when a library started (its deadline begins)."""
        *lines, rest = (self._pending + chunk).split(b"\n")
        self._pending = rest[-_MAX_PENDING:]
        started = False
        for line in lines:
            started |= self._note(line.decode(errors="replace"))
        return started

    def _note(self, line: str) -> bool:
        head, _, rest = line.partition(" ")
        if head == "exit":
            self.exit = int(rest) if rest.lstrip("-").isdigit() else None
            return False
        if not head.isdigit() or int(head) >= len(self.phases):
            return False  # not the probe's (a plugin writing to the pipe): ignored
        index = int(head)
        step, _, text = rest.partition(" ")
        if step == "ok":
            self.done[index] = Probe("ok", text)
        elif step == "failed":
            self.done[index] = Probe("failed", self.phases[index], text)
        else:
            self.phases[index] = rest
        if rest == "start":
            self.current = index
        return rest == "start"

    def verdicts(self, timed_out: bool) -> list[Probe | None]:
        """One probe per library that finished; the one in progress gets the timeout or the crash."""
        out = list(self.done)
        blamed = self.current if self.current is not None and out[self.current] is None else None
        if blamed is None and out and out[0] is None and self.current is None:
            blamed = 0  # the child never started its first library
        if blamed is not None:
            out[blamed] = self._blame(blamed, timed_out)
        return out

    def _blame(self, index: int, timed_out: bool) -> Probe:
        phase = self.phases[index]
        if timed_out:
            return Probe("timeout", phase)
        if self.exit is None:
            return Probe("crashed", phase, "an unknown signal (the child ended without a status)")
        if self.exit < 0:
            return Probe("crashed", phase, _signal_name(-self.exit))
        if phase == "start" and self.current is None:
            return Probe("failed", phase, f"the child process ended with exit status {self.exit} before loading")
        return Probe("crashed", phase, f"exit status {self.exit}")


def run_batch(candidates: list[Candidate], kind: str | None, timeout: float,
              max_api: int | None = None) -> list[Probe]:
    """Loads each candidate in a child (entry, init and unload for kind opforge), timeout seconds
    per library, and returns one probe per candidate."""
    probes: list[Probe | None] = [None] * len(candidates)
    queue = list(range(len(candidates)))
    while queue:
        found = _run_child([candidates[i] for i in queue], kind, timeout, max_api)
        for position, (index, probe) in enumerate(zip(queue, found)):
            if probe is not None and (position == 0 or probe.outcome in ("ok", "failed")):
                probes[index] = probe
        queue = [i for i in queue if probes[i] is None]
    return [p for p in probes if p is not None]


def _request(candidates: list[Candidate], kind: str | None, max_api: int | None, status_fd: int) -> bytes:
    items = [{"target": c.target, "dependencies": list(c.dependencies)} for c in candidates]
    return json.dumps({"status_fd": status_fd, "kind": kind or "", "max_api": max_api, "items": items}).encode()


def _run_child(candidates: list[Candidate], kind: str | None, timeout: float,
               max_api: int | None) -> list[Probe | None]:
    read_fd, write_fd = os.pipe()
    fds = [write_fd] + [c.image_fd for c in candidates if c.image_fd is not None]
    try:
        child = subprocess.Popen([sys.executable, "-I", str(_CHILD)], stdin=subprocess.PIPE,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, pass_fds=fds,
                                 start_new_session=True)
    finally:
        os.close(write_fd)
    state = _Child(len(candidates))
    try:
        _send(child, _request(candidates, kind, max_api, write_fd))
        timed_out = _follow(child, read_fd, state, timeout)
    finally:
        os.close(read_fd)
        _stop(child)
    return state.verdicts(timed_out)


def _send(child: subprocess.Popen, request: bytes) -> None:
    assert child.stdin is not None
    try:
        child.stdin.write(request)
        child.stdin.close()
    except BrokenPipeError:
        pass  # the child is gone already: its verdict says so


def _follow(child: subprocess.Popen, read_fd: int, state: _Child, timeout: float) -> bool:
    """Reads the child's status lines until the pipe closes; True when a library outlasted timeout."""
    pipe = select.poll()
    pipe.register(read_fd, select.POLLIN)
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return True
        if not pipe.poll(min(left, _POLL) * 1000):
            if child.poll() is not None and not pipe.poll(0):
                return False  # the child is gone; whatever it left holding the pipe is not waited for
            continue
        chunk = os.read(read_fd, 65536)
        if not chunk:
            return False
        if state.feed(chunk):
            deadline = time.monotonic() + timeout


def _stop(child: subprocess.Popen) -> None:
    """Asks the supervisor to kill the worker and what it started; if it does not end in time,
    kills its process group."""
    if child.poll() is not None:
        return
    child.send_signal(signal.SIGTERM)
    try:
        child.wait(timeout=_GRACE)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        child.wait()


def run_isolated(path: str, kind: str | None, timeout: float, max_api: int | None = None) -> Probe:
    """Loads the file at path in a child (doctor --isolated)."""
    return run_batch([Candidate(path)], kind, timeout, max_api)[0]


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _stuck_in(phase: str) -> str:
    if phase.startswith("entry"):
        return "init"
    return {"start": "the child's start", "dependencies": "a $ORIGIN dependency's constructor",
            "dlopen": "dlopen (a static constructor)", "loaded": "opforge_plugin_entry",
            "init ok": "unload"}.get(phase, f"the step after {phase}")


def hang_text(probe: Probe, timeout: float) -> str:
    return (f"did not finish loading within {timeout:g}s in a child process: stuck in {_stuck_in(probe.phase)} "
            f"(last phase '{probe.phase}'); {TIMEOUT_FLAG} changes the bound")


def crash_text(probe: Probe) -> str:
    if probe.detail.startswith("exit status"):
        return f"child process ended with {probe.detail} while loading, after phase '{probe.phase}'"
    return f"child process crashed with {probe.detail} after phase '{probe.phase}'"


def _refusal(probe: Probe, timeout: float) -> str | None:
    if probe.outcome == "timeout":
        return hang_text(probe, timeout)
    if probe.outcome == "crashed":
        return f"{crash_text(probe)} (loading it here would take this process down)"
    return None


def admit_in_child(timeout: float, max_api: int | None = None) -> Callable[[list[Candidate]], list[str | None]]:
    """A Registry admit callback: the verified bytes of each library run in a child first; one that
    hangs or crashes there is refused (the reason names the timeout or the signal); anything else
    is left to the host's own checks."""

    def admit(candidates: list[Candidate]) -> list[str | None]:
        return [_refusal(probe, timeout) for probe in run_batch(candidates, "opforge", timeout, max_api)]

    return admit
