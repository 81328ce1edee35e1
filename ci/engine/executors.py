"""One function per stage kind (build, pytest, script, wheel): `run(job, workspace) -> Result`.

A Job carries everything one stage run reads (ci/engine/workspace.py); what its commands run in
comes from ci/engine/stage_env.py.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

from ci import model as mx
from ci.artifacts import wheels
from ci.artifacts.sass import check_sass
from ci.engine.numbers import junit_numbers, stage_numbers
from ci.engine.stage_env import (
    build_env,
    claimed_venv,
    fill,
    filled_env,
    prepared_venv,
    toolkit_env,
    xdist_args,
)
from ci.engine.workspace import STAGE_TIMEOUT_S, Job, Workspace
from ci.provision import venvs
from ci.report.result import Result

__all__ = ["EXECUTORS", "STAGE_TIMEOUT_S", "Job", "Workspace", "build", "build_env", "execute",
           "fill", "pytest", "script", "wheel"]

REPO = mx.REPO


def build(job: Job, ws: Workspace) -> Result:
    """A wheel of packages/<package> built from its sdist, as a user's `pip install` builds it
    (the sdist holds what the package declares; nothing else of the checkout is seen); CUDA SASS
    checked."""
    stage = job.stage
    assert stage.package is not None  # a build stage builds a package
    env = build_env(job, ws)
    with open(job.log, "a") as handle:
        handle.write(f"# knobs {json.dumps(env, sort_keys=True)}\n")
    wheel_dir = ws.out / "wheels" / stage.name / job.digest   # named by the inputs hash
    shutil.rmtree(wheel_dir, ignore_errors=True)
    wheel_dir.mkdir(parents=True)
    if stage.venv == "torch":
        venv = ws.venv(job.matrix, job.cell, "torch", job.log)
        sdist = ws.sdist(job.matrix, stage.package, job.log, torch_venv=venv)
        command = [str(venvs.python(venv)), "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    else:   # an isolated build: its build requirement opforge-spec comes from this tree
        sdist = ws.sdist(job.matrix, stage.package, job.log)
        command = [sys.executable, "-m", "pip", "wheel", "--no-deps",
                   "--find-links", ws.spec_wheels(job.log)]
    command += ["--disable-pip-version-check", "-v", "-w", str(wheel_dir), str(sdist)]
    if ws.sh(command, job.log, env=env, cwd=wheel_dir) != 0:
        return Result("fail", detail=f"pip wheel {sdist.name} (packages/{stage.package}) failed")
    wheels = sorted(str(p) for p in wheel_dir.glob("*.whl"))
    result = Result("pass", outputs={"wheels": wheels}, detail="CPU only (no CUDA in this build)")
    if env["OPFORGE_CUDA_HOME"]:
        sass = check_sass(wheels, job.cell.values["arch_list"], env, job.log)
        result.numbers.update(sass["numbers"])
        result.detail = sass["detail"]
        result.status = "pass" if sass["ok"] else "fail"
    return result


def pytest(job: Job, ws: Workspace) -> Result:
    """pytest over the stage's folder in its venv (pytest-xdist unless serial), JUnit counted."""
    stage = job.stage
    venv = prepared_venv(job, ws)
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
    built = [w for b in job.stage.after for w in job.inputs[b].outputs.get("wheels", [])
             if job.inputs[b].status == "pass"]
    needed = venvs.kind_tools(job.matrix, "wheel")
    with ws.claims.preparing(venvs.venv_path("tools", needed, ws.venv_root)):
        tools = venvs.ensure("tools", needed, ws.logger(job.log), root=ws.venv_root)
    shutil.rmtree(job.work, ignore_errors=True)
    torch_site = None
    if any(wheels.import_name(Path(w)) == "opforge_torch" for w in built):
        torch_venv = ws.venv(job.matrix, job.cell, "torch", job.log)
        torch_site = venvs.site_packages(torch_venv)
    todo = [w for w in built if w not in ws.wheel_checks]
    checked = wheels.repair_and_check(todo, job.work, tools, job.log, torch_site=torch_site,
                                      find_links=ws.spec_wheels(job.log))
    for built_wheel, check in zip(todo, checked):
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



def _repo_relative(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)
