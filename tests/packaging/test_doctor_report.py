"""The doctors' report lives once, in opforge-spec (kernels/opforge_spec/doctor.py): the ORT and
TensorRT doctors carried a Problem and a Report each, which had drifted (one recorded a problem
twice, one had a field of its own). No package defines its own again, each doctor uses the spec's,
and the plugins declare opforge-spec, the one distribution they share (installed independently,
they depend on no other opforge package)."""
from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest
import tomllib

from opforge_spec import variant

REPO = Path(__file__).resolve().parents[2]
PACKAGES = REPO / "packages"
DOCTORS = {"ort_plugin": "opforge_ort/doctor.py", "trt_plugin": "opforge_trt/doctor.py"}
REPORT_MODULE = "opforge_spec.doctor"
# A copy whatever its name: a class with a problem's fields, or with a report's fields or methods
# (opforge-align's Report, an alignment report, has none of them).
PROBLEM_FIELDS = {"code", "message", "fix"}
REPORT_FIELDS = {"checked", "problems"}
REPORT_METHODS = {"problem", "codes"}


def _members(node: ast.ClassDef) -> set[str]:
    fields = {item.target.id for item in node.body
              if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)}
    return fields | {item.name for item in node.body if isinstance(item, ast.FunctionDef)}


def _is_copy(node: ast.AST) -> bool:
    if not isinstance(node, ast.ClassDef):
        return False
    members = _members(node)
    return any(wanted <= members for wanted in (PROBLEM_FIELDS, REPORT_FIELDS, REPORT_METHODS))


def copies(root: Path) -> list[str]:
    """`file:line: class` for each class under root/*/src that is a doctor's Problem or Report."""
    found = []
    for path in sorted(root.glob("*/src/**/*.py")):
        found += [f"{path.relative_to(root.parent)}:{node.lineno}: class {node.name}"
                  for node in ast.walk(ast.parse(path.read_text(), str(path))) if _is_copy(node)]
    return found


def test_no_package_defines_its_own_problem_or_report():
    found = copies(PACKAGES)
    assert not found, f"use {REPORT_MODULE} (Problem, Report) instead of a copy:\n" + "\n".join(found)


@pytest.mark.parametrize("package", DOCTORS)
def test_each_doctor_reports_with_the_spec_report(package):
    tree = ast.parse((PACKAGES / package / "src" / DOCTORS[package]).read_text())
    imported = {(node.module, alias.name) for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) for alias in node.names}
    assert (REPORT_MODULE, "Report") in imported


@pytest.mark.parametrize("package", DOCTORS)
def test_the_plugin_declares_opforge_spec(package, monkeypatch):
    """Every build, CUDA or not, depends on opforge-spec (the metadata provider's answer), at the
    release it builds against: the op tables its Python module reads must name the library's ops."""
    monkeypatch.delenv("OPFORGE_CUDA_HOME", raising=False)
    monkeypatch.delenv("OPFORGE_LOCAL_VERSION", raising=False)
    pyproject = tomllib.loads((PACKAGES / package / "pyproject.toml").read_text())
    (settings,) = pyproject["tool"]["dynamic-metadata"]
    settings = {k: v for k, v in settings.items() if k != "provider"}
    built_against = [r for r in pyproject["build-system"]["requires"] if r.startswith("opforge-spec")]
    dependencies = variant.dynamic_metadata(settings, pyproject["project"])["dependencies"]
    assert built_against and built_against[0] in dependencies, (built_against, dependencies)
    assert os.environ.get("OPFORGE_CUDA_HOME") is None


def test_a_copy_is_found_under_any_name(tmp_path):
    src = tmp_path / "packages" / "x" / "src" / "opforge_x"
    src.mkdir(parents=True)
    (src / "doctor.py").write_text("from dataclasses import dataclass\n\n\n@dataclass\nclass Finding:\n"
                                   "    code: str\n    message: str\n    fix: str\n\n\nclass Notes:\n"
                                   "    def problem(self, code):\n        pass\n\n"
                                   "    def codes(self):\n        return []\n")
    assert copies(tmp_path / "packages") == ["packages/x/src/opforge_x/doctor.py:5: class Finding",
                                             "packages/x/src/opforge_x/doctor.py:11: class Notes"]
