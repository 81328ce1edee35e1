"""What a stage's commands run in: its venv with its tools and input wheels installed on top (and
held while it runs), the build knobs (OPFORGE_* variables, the toolkit, zig), the toolkit a test
stage sees, and the {placeholders} of its command and env filled from the cell."""
from __future__ import annotations

import contextlib
import os
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from ci import model as mx
from ci.artifacts import index
from ci.artifacts.sass import cuobjdump_for
from ci.engine.workspace import Job, Workspace
from ci.provision import toolkits, venvs

MAX_WORKERS = 4          # pytest-xdist workers at most (-n), fewer on a machine with fewer CPUs


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


def venv_kind(job: Job) -> str:
    """The stage's venv, "torch" or "ort" (a stage that prepares one names it)."""
    assert job.stage.venv is not None, f"{job.stage.name}: no venv"
    return job.stage.venv


def prepared_venv(job: Job, ws: Workspace) -> Path:
    """The stage's venv with its tools (venvs.stage_tools) and the wheels of its `after` stages
    installed on top (only what changed since the venv last recorded it)."""
    venv = ws.venv(job.matrix, job.cell, venv_kind(job), job.log)
    run = lambda argv: ws.sh(argv, job.log)  # noqa: E731
    tools = venvs.stage_tools(job.matrix, job.stage)
    base = set(venvs.requirements(job.matrix, job.cell, venv_kind(job)))
    with ws.claims.preparing(venv):
        venvs.install_on_top(venv, {pin.split("==")[0]: (pin, pin) for pin in tools
                                    if pin not in base}, run)
        venvs.install_on_top(venv, built_wheels(job), run, pip_args=("--no-deps", "--force-reinstall"))
        venvs.install_on_top(venv, declared_dependencies(job, venv), run)
    return venv


def declared_dependencies(job: Job, venv: Path) -> dict[str, tuple[str, str]]:
    """What the built wheels declare (Requires-Dist without extras) beyond the venv's own pins:
    a CUDA build's CUDA runtime wheel, which its RUNPATH finds as in a user's install. A pin of
    the same distribution in the cell's toolkit (the runtime it was verified with) is preferred.
    A requirement the venv already meets is kept as installed, as a user's pip keeps it: torch
    2.10.0's own CUDA 12.8 runtime meets `nvidia-cuda-runtime-cu12>=12,<13`, and the cu128
    toolkit's 12.4 runtime over it broke `import torch` (libc10_cuda.so needs a 12.5+ symbol)."""
    known = {_dist_name(p) for p in venvs.requirements(job.matrix, job.cell, venv_kind(job))}
    known |= {_dist_name(slot) for slot in [*built_wheels(job), *venvs.installed(venv)]}
    present = venvs.distributions(venv)
    wanted = {}
    for wheel, _ in built_wheels(job).values():
        for req in index.runtime_requirements(Path(wheel)):
            name = _dist_name(req.name)
            met = name in present and req.specifier.contains(present[name], prereleases=True)
            if name in known or met:
                continue
            target = venvs.toolkit_pin_or(job.matrix, job.cell, str(req))
            wanted[name] = (target, target)
    return wanted


def _dist_name(requirement: str) -> str:
    return canonicalize_name(Requirement(requirement).name)


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
        env["OPFORGE_ZIG"] = ws.zig(job.matrix, job.stage.tools, job.log)
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
