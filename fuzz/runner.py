"""Builds and runs the fuzz targets under fuzz/targets/ (`python -m fuzz`; see fuzz/README.md).

A C++ target (target.cpp + build.py) is compiled with ASan/UBSan and coverage and linked with the
engine (driver.cpp); a Python target (target.py) runs under atheris. Each replays its corpus,
fuzzes for the time given, and keeps new inputs in build/fuzz/<name>/corpus/.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # build.py files import `fuzz` (Unavailable)
    sys.path.insert(0, str(REPO))

from fuzz import Unavailable  # noqa: E402

TARGETS = REPO / "fuzz" / "targets"
BUILD = REPO / "build" / "fuzz"
DRIVER = REPO / "fuzz" / "driver.cpp"
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-g",
            "-std=c++17", "-fno-omit-frame-pointer"]
# -O1 runs about twice as many inputs per second; -O0 compiles in half the time, which is what a
# smoke run of a few seconds (the test suite's) spends most of its time on.
OPTIMIZED, QUICK = "-O1", "-O0"
QUICK_BELOW_S = 30      # runs shorter than this build with QUICK
# trace-cmp as well: the engine turns compared operands into input bytes (magic values).
COVERAGE = ["-fsanitize-coverage=trace-pc,trace-cmp"]
INPUT_KEYS = ("sources", "include_dirs", "defines", "extra_objects", "link_args")
MAX_LEN = 4096          # bytes per input
INPUT_TIMEOUT_S = 10    # one input running longer is a hang
ATHERIS_HINT = "atheris is not installed (nox installs the pin of matrix.yaml tools:)"


class BuildError(Exception):
    """A target that cannot be built: a compiler error or a bad build.py."""


@dataclass(frozen=True)
class Target:
    name: str
    folder: Path
    build_root: Path = BUILD

    @property
    def kind(self) -> str:
        return "cpp" if (self.folder / "target.cpp").is_file() else "python"

    @property
    def corpus(self) -> Path:
        return self.folder / "corpus"

    @property
    def out(self) -> Path:
        return self.build_root / self.name


@dataclass
class Result:
    name: str
    kind: str
    status: str                 # pass | crash | fail | skipped: <reason>
    seconds: float = 0.0        # fuzzing (replay included), not the build
    build_seconds: float = 0.0
    execs: int = 0
    exec_per_s: int = 0
    cov: int = 0
    features: int = 0
    corpus: int = 0
    artifact: str | None = None
    replay: str | None = None
    report: str | None = None   # the sanitizer's or Python's one-line summary of a crash
    log: str | None = None


def discover(root: Path = TARGETS, build_root: Path = BUILD) -> list[Target]:
    if not root.is_dir():
        return []
    return [Target(d.name, d, build_root) for d in sorted(root.iterdir())
            if (d / "target.cpp").is_file() or (d / "target.py").is_file()]


# ------------------------------------------------------------------------------------ build
def _cxx() -> str:
    return os.environ.get("CXX", "g++")


def _sha256(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "little") + part)
    return h.hexdigest()


def _dependencies(depfile: Path) -> list[Path]:
    """The files a make-style .d file (g++ -MMD) lists after the target."""
    text = depfile.read_text().replace("\\\n", " ").replace("\\ ", "\0")
    return [Path(p.replace("\0", " ")) for p in text.split(":", 1)[1].split()]


def _inputs_digest(command: list[str], files: list[Path]) -> str:
    parts = [" ".join(command).encode()]
    for path in files:
        parts += [str(path).encode(), path.read_bytes() if path.is_file() else b"<missing>"]
    return _sha256(*parts)


def _run_compiler(command: list[str], what: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        raise BuildError(f"{what}: {' '.join(command[:1])} failed (exit {done.returncode}):\n"
                         f"{done.stderr.strip()[-4000:]}")


def compile_object(source: Path, obj: Path, flags: list[str]) -> Path:
    """source -> obj, unless the same command already compiled the same bytes (sources and the
    non-system headers g++ -MMD listed)."""
    key = [_cxx(), *flags, "-c", str(source)]
    depfile, stamp = obj.with_suffix(".d"), obj.with_suffix(".stamp")
    if obj.is_file() and stamp.is_file() and depfile.is_file() and (
            stamp.read_text() == _inputs_digest(key, _dependencies(depfile))):
        return obj
    obj.parent.mkdir(parents=True, exist_ok=True)
    tmp = obj.with_name(f"{obj.name}.{os.getpid()}.tmp")  # atomic: runs may share build/fuzz
    _run_compiler([*key, "-MMD", "-MF", str(depfile), "-o", str(tmp)], str(source))
    os.replace(tmp, obj)
    stamp.write_text(_inputs_digest(key, _dependencies(depfile)))
    return obj


def opt_level(seconds: int) -> str:
    return QUICK if seconds < QUICK_BELOW_S else OPTIMIZED


def link(inputs: list[Path], link_args: list[str], exe: Path, opt: str = OPTIMIZED) -> Path:
    key = [_cxx(), *SANITIZE, opt, *map(str, inputs), *link_args]
    stamp = exe.with_name(exe.name + ".stamp")
    digest = _inputs_digest(key, inputs)
    if exe.is_file() and stamp.is_file() and stamp.read_text() == digest:
        return exe
    tmp = exe.with_name(f"{exe.name}.{os.getpid()}.tmp")
    _run_compiler([*key, "-o", str(tmp)], f"linking {exe.name}")
    os.replace(tmp, exe)
    stamp.write_text(digest)
    return exe


def engine_object(opt: str = OPTIMIZED) -> Path:
    """The engine: sanitizers on (it links with the target) but no coverage of its own."""
    return compile_object(DRIVER, BUILD / "engine" / f"driver{opt}.o", [*SANITIZE, opt])


def build_fuzzer(out: Path, sources: Sequence[Path], include_dirs: Sequence[str] = (),
                 defines: Sequence[str] = (), extra_objects: Sequence[str] = (),
                 link_args: Sequence[str] = (), jobs: int = 2, opt: str = OPTIMIZED) -> Path:
    """out/fuzzer from the target's sources (instrumented), the engine and the extras."""
    flags = [*SANITIZE, opt, *COVERAGE, *(f"-I{d}" for d in include_dirs),
             *(f"-D{d}" for d in defines)]

    def one(source: Path) -> Path:
        tag = hashlib.sha256(str(source.resolve()).encode()).hexdigest()[:8]
        return compile_object(source, out / "obj" / f"{source.stem}-{tag}.o", flags)

    with concurrent.futures.ThreadPoolExecutor(max(1, jobs)) as pool:
        objects = list(pool.map(one, sources))
    return link([*objects, engine_object(opt), *map(Path, extra_objects)], list(link_args),
                out / "fuzzer", opt)


def compile_inputs(target: Target) -> dict[str, list[str]]:
    """What the target's build.py says to compile; Unavailable when this host lacks a part."""
    path = target.folder / "build.py"
    if not path.is_file():
        raise BuildError(f"{_shown(path)}: missing (a C++ target needs "
                         "compile_inputs(repo) -> dict)")
    spec = importlib.util.spec_from_file_location(f"fuzz_build_{target.name}", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
        raw = module.compile_inputs(REPO)
    except Unavailable:
        raise
    except RuntimeError as exc:  # the form targets used before fuzz.Unavailable existed
        if str(exc).startswith("unavailable:"):
            raise Unavailable(str(exc).split(":", 1)[1].strip()) from None
        raise BuildError(f"{_shown(path)}: {type(exc).__name__}: {exc}") from None
    except Exception as exc:  # noqa: BLE001  (any error in build.py is that target's failure)
        raise BuildError(f"{_shown(path)}: {type(exc).__name__}: {exc}") from None
    return _checked_inputs(raw, path)


def _checked_inputs(raw: object, path: Path) -> dict[str, list[str]]:
    where = _shown(path)
    if not isinstance(raw, dict) or set(raw) - set(INPUT_KEYS):
        raise BuildError(f"{where}: compile_inputs must return a dict with keys "
                         f"{', '.join(INPUT_KEYS)}; got {raw!r:.200}")
    inputs = {}
    for key in INPUT_KEYS:
        value = raw.get(key, [])
        if not isinstance(value, (list, tuple)) or not all(
                isinstance(v, (str, os.PathLike)) for v in value):
            raise BuildError(f"{where}: {key}: expected a list of paths or strings, "
                             f"got {value!r:.200}")
        inputs[key] = [str(v) for v in value]
    missing = [s for s in inputs["sources"] + inputs["extra_objects"] if not Path(s).is_file()]
    if missing:
        raise BuildError(f"{where}: no such file: {missing[0]}")
    return inputs


def build_target(target: Target, jobs: int = 2, opt: str = OPTIMIZED) -> Path:
    inputs = compile_inputs(target)
    sources = [target.folder / "target.cpp", *map(Path, inputs["sources"])]
    sources = list(dict.fromkeys(p.resolve() for p in sources))  # target.cpp may be listed too
    return build_fuzzer(target.out, sources, inputs["include_dirs"], inputs["defines"],
                        inputs["extra_objects"], inputs["link_args"], jobs, opt)


# ------------------------------------------------------------------------------------ run
def engine_flags(seconds: int, artifacts: Path, max_len: int = MAX_LEN,
                 seed: int | None = None) -> list[str]:
    """libFuzzer's flags, understood by driver.cpp and by atheris alike; without a seed the
    engine picks one from the clock."""
    return [f"-max_total_time={seconds}", f"-max_len={max_len}", f"-timeout={INPUT_TIMEOUT_S}",
            "-print_final_stats=1", f"-artifact_prefix={artifacts}/",
            *([f"-seed={seed}"] if seed else [])]


def _command(target: Target, exe: Path | None) -> list[str]:
    if target.kind == "cpp":
        return [str(exe)]
    return [sys.executable, "-m", "fuzz.pytarget", str(target.folder / "target.py")]


def _shown(path: Path | str) -> str:
    path = Path(path)
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


# What a crash's one-line summary is, most telling first.
REPORT_PATTERNS = (r"=== Uncaught Python exception: ===\n(.+)", r"^(.*runtime error: .*)$",
                   r"^(SUMMARY: .*)$", r"^==\d+== ?(ERROR: .*)$")


def _first_report(text: str) -> str | None:
    for pattern in REPORT_PATTERNS:
        match = re.search(pattern, text, re.M)
        if match:
            return match.group(1).strip()
    return None


def parse_output(text: str) -> dict:
    """Numbers and findings from the output of driver.cpp or libFuzzer (atheris)."""
    found: dict = {}
    progress = re.findall(r"^#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+) corp: (\d+)/", text, re.M)
    if progress:
        execs, cov, features, corpus = map(int, progress[-1])
        found.update(execs=execs, cov=cov, features=features, corpus=corpus)
    for name, key in (("number_of_executed_units", "execs"), ("average_exec_per_sec",
                                                              "exec_per_s")):
        match = re.search(rf"^stat::{name}:\s*(\d+)", text, re.M)
        if match:
            found[key] = int(match.group(1))
    artifact = re.search(r"Test unit written to (\S+)", text)
    if artifact:
        found["artifact"] = artifact.group(1)
    report = _first_report(text)
    if report:
        found["report"] = report[:300]
    return found


def fuzz_target(target: Target, seconds: int, *, max_len: int = MAX_LEN, jobs: int = 2,
                env: dict[str, str] | None = None, seed: int | None = None) -> Result:
    """Builds (C++) and runs one target: its corpus replayed, then `seconds` of fuzzing."""
    result = Result(target.name, target.kind, "fail")
    started = time.monotonic()
    try:
        exe = build_target(target, jobs, opt_level(seconds)) if target.kind == "cpp" else None
        if target.kind == "python" and importlib.util.find_spec("atheris") is None:
            raise Unavailable(ATHERIS_HINT)
    except Unavailable as exc:
        result.status = f"skipped: {exc}"
        return result
    except BuildError as exc:
        result.report = str(exc)
        return result
    result.build_seconds = round(time.monotonic() - started, 1)
    out_corpus = target.out / "corpus"
    out_corpus.mkdir(parents=True, exist_ok=True)
    command = [*_command(target, exe), *engine_flags(seconds, target.out, max_len, seed),
               str(out_corpus), *([str(target.corpus)] if target.corpus.is_dir() else [])]
    log = target.out / "fuzz.log"
    result.log = _shown(log)
    started = time.monotonic()
    run_env = {**os.environ, **(env or {}),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO),
                                                           os.environ.get("PYTHONPATH")]))}
    try:
        with log.open("w") as sink:
            done = subprocess.run(command, cwd=REPO, env=run_env, stdout=sink,
                                  stderr=subprocess.STDOUT, timeout=2 * seconds + 120)
        returncode = done.returncode
    except subprocess.TimeoutExpired:
        returncode = None
    result.seconds = round(time.monotonic() - started, 1)
    return _judge(result, target, exe, log.read_text(errors="replace"), returncode)


def _judge(result: Result, target: Target, exe: Path | None, text: str,
           returncode: int | None) -> Result:
    found = parse_output(text)
    for key in ("execs", "exec_per_s", "cov", "features", "corpus", "report"):
        if key in found:
            setattr(result, key, found[key])
    if "artifact" in found:
        artifact = Path(found["artifact"])
        result.status = "crash"
        result.artifact = _shown(artifact if artifact.is_absolute() else REPO / artifact)
        result.replay = shlex.join([*(_shown(c) if c.startswith(str(REPO)) else c
                                      for c in _command(target, exe)), result.artifact])
    elif returncode is None:
        result.report = "the engine did not stop in time (killed): see the log"
    elif returncode == 0 and "execs" in found:
        result.status = "pass"
    else:
        last = [line for line in text.splitlines() if line.strip()][-1:] or ["no output"]
        what = "printed no statistics" if returncode == 0 else "saved no input"
        result.report = result.report or (f"engine exited {returncode} but {what}; "
                                          f"its last line: {last[0].strip()[:300]}")
    return result


# ------------------------------------------------------------------------------------ report
def _count(n: int) -> str:
    for scale, suffix in ((1e6, "M"), (1e3, "k")):
        if n >= scale:
            return f"{n / scale:.1f}{suffix}"
    return str(n)


def summary_lines(r: Result) -> list[str]:
    if r.status.startswith("skipped"):
        return [f"skip  {r.name}  {r.status}"]
    head = f"{'pass' if r.status == 'pass' else r.status.upper():<5} {r.name}"
    if r.log:  # it ran
        head += f"  {r.seconds:.0f} s  {_count(r.execs)} execs  cov {r.cov}  corpus {r.corpus}"
    lines = [head]
    if r.report:
        lines += [f"      {line}" for line in r.report.splitlines()[:20]]
    if r.artifact:
        lines += [f"      input:  {r.artifact}", f"      replay: {r.replay}"]
    if r.status != "pass" and r.log:
        lines.append(f"      log:    {r.log}")
    return lines


def write_report(results: list[Result], seconds: int, path: Path = BUILD / "report.json") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    failed = [r.name for r in results if r.status in ("crash", "fail")]
    path.write_text(json.dumps({"seconds_per_target": seconds, "ok": not failed,
                                "failed": failed, "targets": [asdict(r) for r in results]},
                               indent=2) + "\n")


def run_all(targets: list[Target], seconds: int, *, jobs: int = 1, max_len: int = MAX_LEN,
            report: Path = BUILD / "report.json", seed: int | None = None) -> list[Result]:
    if any(t.kind == "cpp" for t in targets):
        engine_object(opt_level(seconds))  # once, before parallel builds need it
    build_jobs = max(1, (os.cpu_count() or 1) // max(1, jobs))
    results: list[Result] = []
    with concurrent.futures.ThreadPoolExecutor(max(1, jobs)) as pool:
        futures = {pool.submit(fuzz_target, t, seconds, max_len=max_len, jobs=build_jobs, seed=seed): t
                   for t in targets}
        for future in concurrent.futures.as_completed(futures):
            try:
                results.append(future.result())
            except Exception as exc:  # noqa: BLE001  (one target's runner error fails only it)
                target = futures[future]
                results.append(Result(target.name, target.kind, "fail",
                                      report=f"runner error: {type(exc).__name__}: {exc}"))
            print("\n".join(summary_lines(results[-1])), flush=True)
    results.sort(key=lambda r: r.name)
    write_report(results, seconds, report)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fuzz", description=__doc__.splitlines()[0])
    parser.add_argument("targets", nargs="*", metavar="TARGET", help="names under fuzz/targets/")
    parser.add_argument("--seconds", type=int, default=300, help="fuzzing time per target")
    parser.add_argument("--jobs", type=int, default=1, help="targets run at once")
    parser.add_argument("--max-len", type=int, default=MAX_LEN, help="bytes per input")
    parser.add_argument("--targets-dir", type=Path, default=TARGETS, help="default fuzz/targets")
    parser.add_argument("--build-dir", type=Path, default=BUILD, help="default build/fuzz")
    parser.add_argument("--seed", type=int, help="the engine's random seed (>= 1; default: the "
                        "clock's): a test's run draws the same inputs every time")
    args = parser.parse_args(argv)
    if args.seconds < 1:
        parser.error("--seconds: expected at least 1")
    known = {t.name: t for t in discover(args.targets_dir, args.build_dir)}
    unknown = sorted(set(args.targets) - set(known))
    if unknown:
        parser.error(f"no fuzz target {', '.join(unknown)} (fuzz/targets/ has: "
                     f"{', '.join(known) or 'none'})")
    targets = [known[n] for n in args.targets] if args.targets else list(known.values())
    if not targets:
        print("fuzz: no targets under fuzz/targets/", flush=True)
        return 0
    report = args.build_dir / "report.json"
    results = run_all(targets, args.seconds, jobs=args.jobs, max_len=args.max_len, report=report,
                      seed=args.seed)
    bad = [r for r in results if r.status in ("crash", "fail")]
    skipped = sum(r.status.startswith("skipped") for r in results)
    print(f"fuzz: {len(results) - len(bad) - skipped} passed, {len(bad)} failed, {skipped} "
          f"skipped; {_shown(report)}", flush=True)
    return 1 if bad else 0
