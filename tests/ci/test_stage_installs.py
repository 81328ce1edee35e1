"""A pytest stage's skips must not depend on what ran before it in its venv.

The engine installs a stage's tools and the wheels of its `after` stages on top of a shared venv
(ci/engine/stage_env.py) and never takes them off: a module another stage installs into the same
venv is there for a later stage of the same run, or of an earlier run, and absent on a fresh venv.
So every module a stage's tests import optionally (pytest.importorskip, or an import whose
ImportError skips) that some stage installs into that venv must be installed by the stage itself.
Found so: the host profile's unit-torch (torch 2.15.0) skipped 53 tests in a fresh venv (the
container) and 28 on the host, whose venv earlier stages and runs had given opforge_ort and
transformers.

Computed from the live matrix.yaml (every profile's cells: a venv is shared by every profile whose
cells have the same torch or ORT pins) and the test files themselves; what a stage installs is
counted by its declared distributions (a dependency pip pulls in is not seen)."""
from __future__ import annotations

import ast
import collections
import functools
import sys
from collections.abc import Iterator
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from ci import model as mx
from ci.provision import venvs

MATRIX = mx.load()
SKIPS_ON = {"ImportError", "ModuleNotFoundError"}
# distributions whose top-level module is not their name with "_" for "-"
MODULE_OF = {"pyyaml": "yaml", "onnxruntime-gpu": "onnxruntime", "python-debian": "debian",
             "types-pyyaml": None}


def module_of(requirement: str) -> str | None:
    name = canonicalize_name(Requirement(requirement).name)
    return MODULE_OF.get(name, name.replace("-", "_"))


def package_module(package: str) -> str | None:
    """The module of packages/<package>'s wheel (opforge-ort -> opforge_ort)."""
    project = tomllib.loads((REPO / "packages" / package / "pyproject.toml").read_text())["project"]
    return module_of(project["name"])


def _literal_strings(node: ast.AST) -> list[str]:
    if isinstance(node, (ast.Tuple, ast.List)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def _is_importorskip(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
        node.func.attr == "importorskip"


def _caught(handler: ast.ExceptHandler) -> set[str]:
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return {k.id for k in kinds if isinstance(k, ast.Name)}


def optional_imports(source: str) -> Iterator[tuple[str, int]]:
    """(top-level module, line) of every import a test file skips without: importorskip("m")
    (a name looped over a literal tuple too), and `import m` in a try whose except ImportError
    skips."""
    tree = ast.parse(source)
    loops = collections.defaultdict(list)   # loop variable -> the literal values it takes
    for node in ast.walk(tree):
        if isinstance(node, ast.For) and isinstance(node.target, ast.Name):
            loops[node.target.id] += _literal_strings(node.iter)
    for node in ast.walk(tree):
        if _is_importorskip(node) and node.args:
            arg = node.args[0]
            names = [arg.value] if isinstance(arg, ast.Constant) else loops.get(getattr(arg, "id", ""), [])
            yield from ((name.split(".")[0], node.lineno) for name in names)
        elif isinstance(node, ast.Try) and any(
                _caught(h) & SKIPS_ON and "skip" in ast.unparse(h) for h in node.handlers):
            for statement in node.body:
                for inner in ast.walk(statement):
                    if isinstance(inner, ast.Import):
                        yield from ((a.name.split(".")[0], inner.lineno) for a in inner.names)
                    elif isinstance(inner, ast.ImportFrom) and inner.module and not inner.level:
                        yield inner.module.split(".")[0], inner.lineno


def stage_optional_imports(stage: mx.Stage) -> dict[str, list[str]]:
    """module -> ["path:line", ...] over every .py file of the stage's test folder."""
    return _folder_optional_imports(stage.tests_dir)


@functools.cache
def _folder_optional_imports(folder: str) -> dict[str, list[str]]:
    found = collections.defaultdict(list)
    for path in sorted((REPO / folder).rglob("*.py")):
        for module, line in optional_imports(path.read_text()):
            found[module].append(f"{path.relative_to(REPO)}:{line}")
    return found


def installs(cell: mx.Cell, stage: mx.Stage) -> frozenset[str]:
    """The modules a stage finds in its venv because of what it declares: the venv's pins and this
    tree's op spec (ci/engine/workspace.py), its tools (venvs.stage_tools) and the wheels of its
    `after` build stages (stage_env.prepared_venv); a build stage in a venv installs `build` there
    to make its sdist (workspace._make_sdist)."""
    return _installs(tuple(venvs.requirements(MATRIX, cell, stage.venv)), stage.name)


@functools.cache
def _installs(requirements: tuple[str, ...], name: str) -> frozenset[str]:
    stage = MATRIX.stages[name]
    pins = [*requirements, "opforge-spec"]
    if stage.kind == "build":
        pins += venvs.kind_tools(MATRIX, "build")
    else:
        pins += venvs.stage_tools(MATRIX, stage)
    modules = {module_of(pin) for pin in pins}
    modules |= {package_module(MATRIX.stages[b].package) for b in stage.after
                if MATRIX.stages[b].kind == "build" and stage.kind != "build"}
    return frozenset(modules - {None})


def venv_runs() -> dict[str, list[tuple[str, mx.Cell, mx.Stage]]]:
    """venv name -> (profile, cell, stage) of every stage of every profile that runs in it."""
    runs = collections.defaultdict(list)
    for profile in MATRIX.profiles:
        cells, _ = mx.expand(MATRIX, profile)
        names = MATRIX.profiles[profile].stages or tuple(MATRIX.stages)
        for cell in cells:
            for stage in (MATRIX.stages[name] for name in names):
                if stage.venv:
                    venv = venvs.venv_path(f"{stage.venv}-{cell.values[stage.venv]}",
                                           venvs.requirements(MATRIX, cell, stage.venv))
                    runs[venv.name].append((profile, cell, stage))
    return runs


def order_dependent_skips() -> list[str]:
    problems = set()
    for venv, runs in venv_runs().items():
        installed_by = collections.defaultdict(set)    # module -> stages installing it here
        for _, cell, stage in runs:
            for module in installs(cell, stage):
                installed_by[module].add(stage.name)
        for profile, cell, stage in runs:
            if stage.kind != "pytest":
                continue
            own = installs(cell, stage)
            for module, where in stage_optional_imports(stage).items():
                others = installed_by.get(module, set()) - {stage.name}
                if others and module not in own:
                    problems.add(f"{stage.name} ({profile}, venv {venv}): its tests skip without "
                                 f"{module} ({where[0]}), which {', '.join(sorted(others))} "
                                 f"install(s) into that venv, and it does not")
    return sorted(problems)


def test_the_parser_finds_each_form_of_optional_import():
    source = '''
import pytest
a = pytest.importorskip("alpha.sub", reason="x")
for module in ("beta", "gamma"):
    pytest.importorskip(module)
try:
    import delta
    from epsilon.x import y
except ImportError:
    pytest.skip("no delta", allow_module_level=True)
try:
    import zeta
except ImportError:
    zeta = None
'''
    assert sorted(m for m, _ in optional_imports(source)) == ["alpha", "beta", "delta", "epsilon",
                                                              "gamma"]


def test_torch_ext_tests_import_the_ort_plugin_and_transformers_optionally():
    """The check below sees what it guards: unit-torch's tests skip without these."""
    found = stage_optional_imports(MATRIX.stages["unit-torch"])
    assert {"opforge_ort", "transformers", "opforge_align", "onnxruntime"} <= set(found)


def test_unit_torch_installs_every_optional_import_its_tests_skip_without():
    cells, _ = mx.expand(MATRIX, "host")
    stage = MATRIX.stages["unit-torch"]
    missing = {cell.id: sorted(set(stage_optional_imports(stage)) - installs(cell, stage))
               for cell in cells}
    # onnxscript, onnx and onnxruntime are torch venv pins; every other optional import declared
    assert {cell: mods for cell, mods in missing.items() if mods} == {}


def test_no_pytest_stage_skips_depending_on_what_ran_before_it_in_its_venv():
    assert order_dependent_skips() == []
