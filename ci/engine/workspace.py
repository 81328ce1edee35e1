"""A Job (one stage of one cell and everything it reads) and the Workspace of a run: where it
writes, the venvs' root, the stage timeout, and what runs share, provisioned once (venvs,
toolkits, ONNX Runtime headers)."""
from __future__ import annotations

import dataclasses
import shutil
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from ci import model as mx
from ci.artifacts import sdists
from ci.engine.cache import tree_hash
from ci.engine.claims import VenvClaims
from ci.engine.process import run_logged
from ci.provision import debian, toolkits, venvs
from ci.report.result import Result

REPO = mx.REPO
STAGE_TIMEOUT_S = 1200   # one command of a stage (a hung test must not stall the matrix)


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


class Workspace:
    """Where a run writes (out), the venvs' root, the stage timeout; what it provisioned once."""

    def __init__(self, out: Path, *, venv_root: Path = venvs.VENVS,
                 timeout_s: int = STAGE_TIMEOUT_S, say: Callable[[str], None] = print):
        self.out, self.venv_root, self.timeout_s, self.say = out, venv_root, timeout_s, say
        self._toolkits: dict[str, dict[str, str]] = {}
        self._ort_include: str | None = None
        self._kernels_token: str | None = None
        self._spec_wheels: str | None = None
        self._sdists: dict[str, Path] = {}
        self._sdist_lock = threading.Lock()      # one package's sdist is made once, by the first asker
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
        code, cpu_s = run_logged(command, log, env=env, cwd=cwd, timeout_s=self.timeout_s)
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

    def spec_wheels(self, log: Path) -> str:
        """A folder holding this tree's opforge-spec wheel (kernels/), the build requirement of the
        packages' isolated builds (`pip wheel --find-links`); built once per run."""
        with self._provisioning:
            if self._spec_wheels is None:
                folder = self.out / "spec-wheel" / tree_hash([REPO / "kernels"])
                if not any(folder.glob("opforge_spec-*.whl")):
                    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
                               "--disable-pip-version-check", "-w", str(folder), str(REPO / "kernels")]
                    if self.sh(command, log) != 0:
                        raise RuntimeError("pip wheel kernels/ (opforge-spec, the packages' build "
                                           "requirement) failed; see the log")
                self._spec_wheels = str(folder)
            return self._spec_wheels

    def sdist(self, matrix: mx.Matrix, package: str, log: Path, *, torch_venv: Path | None = None) -> Path:
        """packages/<package>'s sdist, what its build stage builds the wheel from (as a user's
        `pip install` does): made once per source tree and kept across runs. torch_ext's is made in
        `torch_venv` (its setup.py imports torch), every other with the `build` tool's venv."""
        folder = REPO / "packages" / package
        with self._sdist_lock:
            if package not in self._sdists:
                outdir = self.out / "sdists" / package / tree_hash([folder])
                made = sorted(outdir.glob("*.tar.gz"))
                self._sdists[package] = made[0] if len(made) == 1 else self._make_sdist(
                    matrix, folder, outdir, log, torch_venv)
            return self._sdists[package]

    def _make_sdist(self, matrix: mx.Matrix, folder: Path, outdir: Path, log: Path,
                    torch_venv: Path | None) -> Path:
        build_pin = venvs.kind_tools(matrix, "build")
        if sdists.needs_torch(folder):
            assert torch_venv is not None, f"{folder.name}: its sdist needs a venv with torch"
            venv = torch_venv
            venvs.install_on_top(venv, {"build": (build_pin[0], build_pin[0])},
                                 lambda argv: self.sh(argv, log))
        else:
            venv = venvs.ensure("build", build_pin, self.logger(log), root=self.venv_root)
        shutil.rmtree(outdir, ignore_errors=True)
        return sdists.make_sdist(venvs.python(venv), folder, outdir,
                                 lambda argv, env: self.sh(argv, log, env=env),
                                 links=sdists.find_links(self.spec_wheels(log)))

    def toolkit(self, matrix: mx.Matrix, tid: str) -> dict[str, str]:
        with self._provisioning:
            if tid not in self._toolkits:
                found = toolkits.provision(tid, matrix.data["toolkits"][tid])
                self._toolkits[tid] = dict(found.env)
            return self._toolkits[tid]

    def zig(self, matrix: mx.Matrix, tools: Sequence[str], log: Path) -> str:
        """The zig executable of the pinned ziglang wheel (a stage's `tools: [ziglang]`), in a
        venv of its own."""
        pins = [p for p in venvs.tools_requirements(matrix, tools) if p.startswith("ziglang==")]
        venv = venvs.ensure("zig", pins, self.logger(log), root=self.venv_root)
        found = sorted(venv.glob("lib/python3*/site-packages/ziglang/zig"))
        if not found:
            raise RuntimeError(f"{venv}: the ziglang wheel installed no ziglang/zig executable")
        return str(found[0])

    def ort_include(self, matrix: mx.Matrix) -> str:
        with self._provisioning:
            if self._ort_include is None:
                self._ort_include = str(debian.ort_include_dir(matrix))
            return self._ort_include
