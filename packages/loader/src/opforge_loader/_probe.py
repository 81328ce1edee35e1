"""The child process of isolation.run_batch: load libraries and run their entry, init and unload so
that a crash or a hang takes down this process, not the caller.

`python -I _probe.py` with a JSON request on stdin: status_fd (where phases go), kind, max_api,
items ([{"target": a path or /proc/self/fd/N, "dependencies": [paths dlopen'ed first]}]). This
process supervises: it becomes the child subreaper, forks a worker that loads the items in order
and writes "<index> <phase>" per step to status_fd, waits for it (or for the caller's SIGTERM),
writes "exit <status>" (negative: the signal), then kills whatever the plugins started (a fork, a
setsid daemon: as their subreaper, orphans come back to this process) and exits. It needs only
ctypes and os, so it starts fast; the CLI imports become_subreaper and kill_descendants from it."""
from __future__ import annotations

import ctypes as C
import json
import os
import signal
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
MAX_LINE = 2000  # bytes of a status line


class Plugin(C.Structure):
    """The head of OpforgePlugin (include/opforge/plugin.h)."""

    _fields_ = [("api_version", C.c_uint32), ("struct_size", C.c_uint32), ("name", C.c_char_p),
                ("version", C.c_char_p), ("num_ops", C.c_uint32), ("ops", C.c_void_p),
                ("init", C.c_void_p), ("unload", C.c_void_p)]


class HostInfo(C.Structure):
    _fields_ = [("api_version", C.c_uint32), ("host_version", C.c_char_p)]


class Failed(Exception):
    """The plugin refused to load (a status, not a crash): the message goes to the caller."""


def become_subreaper() -> bool:
    """Orphaned descendants of this process are re-parented to it instead of to init."""
    try:
        return C.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _children() -> set[int]:
    pids: set[int] = set()
    try:
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/children") as f:
                pids.update(int(p) for p in f.read().split())
    except OSError:
        return _children_by_scan()
    return pids


def _children_by_scan() -> set[int]:
    """Without /proc/<pid>/task/<tid>/children (CONFIG_PROC_CHILDREN): every process's parent."""
    me, pids = os.getpid(), set()
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if entry.isdigit() and int(fields[1]) == me:
            pids.add(int(entry))
    return pids


def kill_descendants() -> None:
    """SIGKILL every child until none is left: in a subreaper the orphans of the killed ones come
    back as children, so a whole tree goes, setsid daemons included."""
    while True:
        for pid in _children():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.001)


def _text(value: bytes | None) -> str:
    return value.decode(errors="replace") if value else "(null)"


def _run_hooks(lib: C.CDLL, max_api: int | None, say) -> str:
    entry = lib.opforge_plugin_entry
    entry.restype = C.POINTER(Plugin)
    found = entry()
    if not found:
        raise Failed("opforge_plugin_entry() returned NULL")
    plugin = found.contents
    say(f"entry api_version={plugin.api_version} ops={plugin.num_ops}")
    if max_api is not None and not 1 <= plugin.api_version <= max_api:
        # Another layout: calling its init through this one could crash for no fault of the plugin.
        raise Failed(f"api_version {plugin.api_version} out of range [1, {max_api}]: init not run")
    if plugin.init:
        init = C.CFUNCTYPE(C.c_int32, C.POINTER(HostInfo), C.c_char_p, C.c_size_t)(plugin.init)
        err = C.create_string_buffer(1024)
        status = init(C.byref(HostInfo(max_api or 1, b"probe")), err, len(err) - 1)
        if status != 0:
            raise Failed(f"init failed (status {status}): {err.value.decode(errors='replace')}")
        say("init ok")
    if plugin.unload:
        C.CFUNCTYPE(None)(plugin.unload)()
        say("unload ok")
    return f"entry, init and unload ran (plugin {_text(plugin.name)} {_text(plugin.version)})"


def probe(item: dict, kind: str, max_api: int | None, say, keep: list) -> None:
    mode = os.RTLD_NOW | os.RTLD_LOCAL
    if item["dependencies"]:
        say("dependencies")
        keep += [C.CDLL(dep, mode=mode) for dep in item["dependencies"]]
    say("dlopen")
    lib = C.CDLL(item["target"], mode=mode)
    keep.append(lib)
    say("loaded")
    say("ok " + (_run_hooks(lib, max_api, say) if kind == "opforge" else "loaded"))


def work(request: dict, status_fd: int) -> int:
    keep: list = []  # the libraries stay loaded: a later plugin may not unmap an earlier one's code
    for index, item in enumerate(request["items"]):
        def say(phase: str, index: int = index) -> None:
            line = f"{index} {' '.join(phase.split())}".encode(errors="replace")[:MAX_LINE]
            os.write(status_fd, line + b"\n")  # one write of less than PIPE_BUF: never torn

        say("start")
        try:
            probe(item, request["kind"], request["max_api"], say, keep)
        except (Failed, OSError, AttributeError) as e:  # dlopen's error, a missing entry symbol
            say(f"failed {e}")
    return 0


def _on_sigterm(_signum, _frame) -> None:
    raise KeyboardInterrupt  # leaves the wait: the worker and everything below it are killed


def _start_worker(request: dict, status_fd: int) -> int:
    worker = os.fork()
    if worker == 0:
        code = 1
        try:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            code = work(request, status_fd)
        finally:
            os._exit(code)
    return worker


def supervise(request: dict) -> int:
    status_fd = request["status_fd"]
    os.set_inheritable(status_fd, False)  # a program a plugin executes must not hold the caller's pipe
    become_subreaper()
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        _pid, status = os.waitpid(_start_worker(request, status_fd), 0)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        os.write(status_fd, f"exit {code}\n".encode())
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        kill_descendants()
    return 0


if __name__ == "__main__":
    sys.exit(supervise(json.loads(sys.stdin.read())))
