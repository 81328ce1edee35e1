"""opforge-loader: list, doctor, run, watch, new-plugin, cmake-dir."""
from __future__ import annotations

import argparse
import json
import math
import os
import stat
import sys
import threading
import time
from pathlib import Path
from typing import NoReturn

from . import _capi, _probe, isolation, manifests, template
from . import doctor as doctor_mod
from .errors import ManifestError, OpforgeError, printable
from .registry import Registry, check_manifest


class UsageError(Exception):
    """A bad argument or input file: one line, exit status 2."""


def _registry(args, log) -> Registry:
    """A registry that runs each library in a child process (bounded by --timeout) before loading it."""
    admit = isolation.admit_in_child(args.timeout, _capi.lib().opforge_loader_api_version())
    return Registry(log=log, admit=admit)


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*header), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*map(str, r)) for r in rows]
    return "\n".join(lines)


def _other_kinds(directory: str) -> list[dict]:
    """Manifests the host does not load (onnxruntime / tensorrt), validated."""
    rows = []
    for path in manifests.find_manifests(directory):
        try:
            m = manifests.load(path)
        except ManifestError:
            continue  # unreadable or malformed: the registry's scan refused it with one line
        if m.kind == "opforge":
            continue
        try:
            check_manifest(path)
            state = "manifest ok"
        except OpforgeError as e:
            state = f"REFUSED: {str(e).split(': ', 2)[-1]}"
        for op in m.ops:
            rows.append({"plugin": m.name, "plugin_version": m.version, "kind": m.kind,
                         "op": f"{op.domain}::{op.name}", "version": str(op.version),
                         "state": state, "refs": "-", "library": str(m.library)})
    return rows


def _listing(reg: Registry, directory: str) -> tuple[list[dict], list[str]]:
    rows = [{"plugin": o.plugin, "plugin_version": o.plugin_version, "kind": o.kind, "op": f"{o.domain}::{o.name}",
             "version": o.version, "state": o.state, "refs": o.refs, "library": o.library,
             "description": o.description} for o in reg.ops()]
    return rows + _other_kinds(directory), list(reg.refusals)


def _print_listing(rows: list[dict], refusals: list[str]) -> None:
    header = ["plugin", "version", "kind", "op", "op version", "state", "refs"]
    body = [[r["plugin"], r["plugin_version"], r["kind"], r["op"], r["version"], r["state"], r["refs"]] for r in rows]
    print(_table(body, header) if body else "(no plugins)")
    for line in refusals:
        print(line, file=sys.stderr)


def cmd_list(args) -> int:
    with _registry(args, lambda level, line: None) as reg:
        reg.load_dir(args.dir)
        rows, refusals = _listing(reg, args.dir)
    if args.json:
        print(json.dumps({"ops": rows, "refusals": refusals}, indent=2))
    else:
        _print_listing(rows, refusals)
    return 0


def cmd_doctor(args) -> int:
    archs = doctor_mod.parse_arch_list(args.require_arch) if args.require_arch else set()
    libs = doctor_mod.libraries_in(args.path)
    if not libs:
        print(f"opforge-loader doctor: no libraries under {args.path}", file=sys.stderr)
        return 2
    results = {lib: doctor_mod.diagnose(lib, kind=args.kind, require_archs=archs, cxx11_abi=args.cxx11_abi,
                                        isolated=args.isolated, timeout=args.timeout) for lib in libs}
    print(doctor_mod.to_json(results) if args.json else doctor_mod.render(results))
    return 1 if any(f.status == "error" for fs in results.values() for f in fs) else 0


def _parse_attr(text: str) -> tuple[str, object]:
    if "=" not in text:
        raise UsageError(f"opforge-loader run: --attr: expected name=value, got {text!r}")
    name, value = text.split("=", 1)
    for conv in (int, float):
        try:
            return name, conv(value)
        except ValueError:
            pass
    return name, value


def _load_input(path: str):
    """The array in the .npy file at path: a regular file (a FIFO must not hang the read), no
    pickled objects (loading one runs code)."""
    import numpy as np

    def refuse(problem: str) -> UsageError:
        return UsageError(f"opforge-loader run: --input {printable(path)}: {problem}")

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise refuse(f"cannot open: {e.strerror or e}") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise refuse("not a regular file; expected a .npy file")
        try:
            value = np.load(f, allow_pickle=False)
        except (ValueError, OSError, EOFError, MemoryError) as e:
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise refuse(f"expected a .npy file of a numeric array (pickled data is never loaded), "
                         f"but it could not be read: {printable(first)}") from None
    if not isinstance(value, np.ndarray):
        value.close()
        raise refuse("is a .npz archive; expected one .npy file per --input")
    return value


def _op_label(reg: Registry, op) -> str:
    """The op and the plugin file it comes from, for a message about it."""
    found = next((o for o in reg.ops() if (o.domain, o.name, o.version_major) == (op.domain, op.name, op.version_major)),
                 None)
    where = f" (plugin {found.plugin} {found.plugin_version}, {found.library})" if found else ""
    return f"{op.domain}::{op.name}@{op.version_major}{where}"


def _run_within(reg: Registry, op, inputs, attrs, timeout: float):
    """op.run in a worker thread; a call that outlasts the timeout ends the command (the thread is
    stuck inside the plugin and cannot be stopped any other way)."""
    result: dict = {}

    def work():
        try:
            result["out"] = op.run(*inputs, **attrs)
        except Exception as e:  # noqa: BLE001  (whatever it is: raised again by the caller's thread)
            result["error"] = e

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    try:
        worker.join(timeout)
    finally:
        if worker.is_alive():  # also on Ctrl-C: returning would close the registry under the plugin
            print(f"opforge-loader run: {_op_label(reg, op)} did not return within {timeout:g}s; "
                  f"{isolation.TIMEOUT_FLAG} changes the bound", file=sys.stderr, flush=True)
            _exit_now(1)
    if "error" in result:
        raise result["error"]
    return result["out"]


def _save_outputs(outs, targets: list[str]) -> None:
    import numpy as np

    for target, arr in zip(targets, outs):
        try:
            np.save(target, arr)
        except OSError as e:
            raise UsageError(f"opforge-loader run: --out {printable(target)}: cannot write: {e.strerror or e}") from None


def cmd_run(args) -> int:
    inputs = [_load_input(p) for p in args.input]
    attrs = dict(_parse_attr(a) for a in args.attr)
    with _registry(args, lambda level, line: print(line, file=sys.stderr) if args.verbose else None) as reg:
        reg.load_dir(args.plugin_dir)
        for line in reg.refusals:
            print(line, file=sys.stderr)
        try:
            with reg.acquire(args.op, args.version) as op:
                out = _run_within(reg, op, inputs, attrs, args.timeout)
                used = f"{op.domain}::{op.name}@{op.version_major} (plugin version {op.plugin_version})"
        except OpforgeError as e:
            print(e, file=sys.stderr)
            return 1
    outs = out if isinstance(out, tuple) else (out,)
    targets = args.out or []
    if len(targets) > len(outs):
        raise UsageError(f"opforge-loader run: --out: expected at most {len(outs)} (one per output of {used}), "
                         f"got {len(targets)}")
    _save_outputs(outs, targets)
    print(f"{used}: " + ", ".join(f"output {i}: {a.dtype} {list(a.shape)}" + (f" -> {targets[i]}" if i < len(targets) else "")
                                   for i, a in enumerate(outs)))
    return 0


def cmd_watch(args) -> int:
    reg = _registry(args, lambda level, line: print(line, flush=True))
    print(f"opforge-loader watch {Path(args.dir).resolve()} (every {args.interval}s; Ctrl-C stops)", flush=True)
    n = 0
    last_error = None
    try:
        while args.iterations is None or n < args.iterations:
            last_error = _watch_step(reg, args.dir, last_error)
            n += 1
            if args.iterations is None or n < args.iterations:
                time.sleep(args.interval)
    except KeyboardInterrupt:
        pass
    finally:
        reg.close()
    return 0


def _watch_step(reg: Registry, directory: str, last_error: str | None) -> str | None:
    """One scan; a failing scan (directory gone for a moment) is said once and the running
    plugins stay. Returns the scan's error, if any."""
    try:
        if reg.sync(directory):
            _print_listing(*_listing(reg, directory)[:1], [])
            sys.stdout.flush()
    except OpforgeError as e:
        if str(e) != last_error:
            print(e, flush=True)
        return str(e)
    return None


def cmd_new_plugin(args) -> int:
    try:
        files = template.write(args.name, args.dir, op=args.op, domain=args.domain)
    except (ValueError, FileExistsError) as e:
        print(f"opforge-loader new-plugin: {e}", file=sys.stderr)
        return 2
    for f in files:
        print(f"wrote {f}")
    print(f"build: cmake -S {args.dir} -B {args.dir}/build -Dopforge_plugin_DIR=\"$(opforge-loader cmake-dir)\" && cmake --build {args.dir}/build")
    return 0


def _parse_op(text: str) -> tuple[str, str, int]:
    parts = text.split(":")
    if len(parts) != 3 or not parts[2].isdigit():
        raise UsageError(f"opforge-loader manifest: --op: expected domain:Name:version, got {text!r}")
    return parts[0], parts[1], int(parts[2])


def cmd_manifest(args) -> int:
    if args.rehash:
        print(f"{args.library}: sha256 {manifests.rehash(args.library)}")
        return 0
    missing = [f"--{n.replace('_', '-')}" for n in ("name", "version", "kind", "api_version", "sdk_min") if getattr(args, n) is None]
    if missing or not args.op:
        print(f"opforge-loader manifest: {', '.join(missing + ([] if args.op else ['--op']))} required", file=sys.stderr)
        return 2
    path = manifests.write(args.library, name=args.name, version=args.version, kind=args.kind, api_version=args.api_version,
                           sdk_min=args.sdk_min, sdk_max=args.sdk_max, ops=[_parse_op(o) for o in args.op])
    check_manifest(path)
    print(f"wrote {path}")
    return 0


def cmd_paths(args) -> int:
    import opforge_loader as pkg

    print({"cmake-dir": pkg.cmake_dir, "include-dir": pkg.include_dir, "library-path": pkg.library_path,
           "plugin-dir": pkg.plugin_dir}[args.command]())
    return 0


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 < value <= threading.TIMEOUT_MAX):
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0 and at most {threading.TIMEOUT_MAX:.0f} "
                                         f"(the longest wait this platform supports), got {text!r}")
    return value


class _Parser(argparse.ArgumentParser):
    """Usage errors in one line, exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message}\n")


def _add_timeout(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--timeout", type=_seconds, default=isolation.DEFAULT_TIMEOUT, metavar="SECONDS",
                        help=f"{what} (default {isolation.DEFAULT_TIMEOUT:g})")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="opforge-loader", description="opforge hot-plug operator loader")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("list", help="load a plugin directory and print its ops")
    s.add_argument("dir")
    s.add_argument("--json", action="store_true")
    _add_timeout(s, "per plugin: its load (constructors, entry, init) runs in a child process first and is "
                    "refused when it takes longer")
    s.set_defaults(fn=cmd_list)

    s = sub.add_parser("doctor", help="diagnose a plugin library (or every library in a directory)")
    s.add_argument("path")
    s.add_argument("--json", action="store_true")
    s.add_argument("--isolated", action="store_true", help="also load it (entry, init, unload) in a child process")
    s.add_argument("--kind", choices=sorted(doctor_mod.ENTRY_POINTS), help="default: from the manifest or the exports")
    s.add_argument("--require-arch", help="CUDA archs that must be embedded as SASS, e.g. '8.0;9.0'")
    s.add_argument("--cxx11-abi", type=int, choices=(0, 1), help="expected _GLIBCXX_USE_CXX11_ABI")
    _add_timeout(s, "per library: how long the --isolated child may take")
    s.set_defaults(fn=cmd_doctor)

    s = sub.add_parser("run", help="run one op on .npy inputs")
    s.add_argument("op", help="op name, optionally domain::Name")
    s.add_argument("--input", action="append", required=True, help=".npy file, once per input in order")
    s.add_argument("--attr", action="append", default=[], help="name=value")
    s.add_argument("--plugin-dir", required=True)
    s.add_argument("--out", action="append", help=".npy file per output")
    s.add_argument("--version", type=int, default=0, help="op major version (default: newest)")
    s.add_argument("-v", "--verbose", action="store_true", help="print the loader's state log")
    _add_timeout(s, "per plugin load (run in a child process first) and for the op's call")
    s.set_defaults(fn=cmd_run)

    s = sub.add_parser("watch", help="keep a directory loaded: pick up new, replaced and removed plugins")
    s.add_argument("dir")
    s.add_argument("--interval", type=float, default=1.0)
    s.add_argument("--iterations", type=int, help="stop after N scans (default: run until Ctrl-C)")
    _add_timeout(s, "per new or changed plugin: its load runs in a child process first")
    s.set_defaults(fn=cmd_watch)

    s = sub.add_parser("new-plugin", help="write a standalone plugin project using the installed SDK")
    s.add_argument("name")
    s.add_argument("dir")
    s.add_argument("--op", help="op name (default: CamelCase of NAME)")
    s.add_argument("--domain", default="custom")
    s.set_defaults(fn=cmd_new_plugin)

    s = sub.add_parser("manifest", help="write <library>.manifest.json (any kind), or --rehash an existing manifest")
    s.add_argument("library", help="the library (or, with --rehash, its manifest)")
    s.add_argument("--rehash", action="store_true", help="only refresh sha256 of the given manifest")
    s.add_argument("--name")
    s.add_argument("--version")
    s.add_argument("--kind", choices=sorted(doctor_mod.ENTRY_POINTS))
    s.add_argument("--api-version", type=int)
    s.add_argument("--sdk-min")
    s.add_argument("--sdk-max")
    s.add_argument("--op", action="append", help="domain:Name:version, once per op")
    s.set_defaults(fn=cmd_manifest)

    for name in ("cmake-dir", "include-dir", "library-path", "plugin-dir"):
        sub.add_parser(name, help=f"print the {name.replace('-', ' ')}").set_defaults(fn=cmd_paths)
    return p


def _exit_now(code: int) -> None:
    """Ends the process without unwinding (a worker thread may be inside a plugin), after the
    processes plugins started."""
    sys.stdout.flush()
    sys.stderr.flush()
    _probe.kill_descendants()
    os._exit(code)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Plugins loaded here may start processes: as subreaper, this process gets their orphans too,
    # and nothing a plugin started outlives the command.
    _probe.become_subreaper()
    try:
        return args.fn(args)
    except UsageError as e:
        print(e, file=sys.stderr)
        return 2
    except OpforgeError as e:  # a refusal is one line naming the file and the problem, not a traceback
        print(e, file=sys.stderr)
        return 1
    finally:
        _probe.kill_descendants()


if __name__ == "__main__":
    sys.exit(main())
