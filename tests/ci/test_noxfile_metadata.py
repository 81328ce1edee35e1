"""noxfile.py declares what it imports in a PEP 723 script block, so a plain `pip install nox;
nox -l` lists the sessions (nox installs the block's dependencies first); ci/bootstrap.py reads
the same block and pins each name at matrix.yaml's tools: version."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from ci import bootstrap

REPO = Path(__file__).resolve().parents[2]
NOXFILE = (REPO / "noxfile.py").read_text()
BOOTSTRAP_PYTHON = REPO / ".nox" / "_bootstrap" / "bin" / "python"


def block_dependencies() -> list[Requirement]:
    if sys.version_info < (3, 11):
        pytest.skip("tomllib: Python 3.11")
    import tomllib

    lines = NOXFILE.split("# /// script\n", 1)[1].split("# ///\n", 1)[0].splitlines()
    return [Requirement(text) for text in
            tomllib.loads("\n".join(line[2:] for line in lines))["dependencies"]]


def needs_version() -> str:
    for node in ast.parse(NOXFILE).body:
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "nox.needs_version":
            return node.value.value
    raise AssertionError("noxfile.py sets no nox.needs_version")


def test_bootstrap_reads_the_names_of_the_block():
    assert bootstrap.NEEDED == tuple(r.name.lower() for r in block_dependencies())
    assert bootstrap.NEEDED[0] == "nox"


def test_the_block_imports_what_ci_reads_matrix_yaml_with():
    assert {"nox", "pyyaml", "packaging", "pydantic"} <= set(bootstrap.NEEDED)


def test_every_name_is_pinned_in_tools_and_the_pinned_nox_reads_the_block(matrix):
    for requirement in block_dependencies():
        assert requirement.name.lower() in matrix.tools, requirement.name
        assert requirement.specifier.contains(matrix.tools[requirement.name.lower()]), requirement
    nox = next(r for r in block_dependencies() if r.name == "nox")
    assert str(nox.specifier) == needs_version()
    assert SpecifierSet(needs_version()).contains(matrix.tools["nox"])


@pytest.mark.parametrize("text, problem", [
    ("import nox\n", "no `# /// script` block"),
    ("# /// script\n# requires-python = '>=3.9'\n# ///\n", "has no `dependencies"),
])
def test_a_noxfile_without_the_block_is_named(text, problem):
    with pytest.raises(ValueError, match=problem):
        bootstrap.script_dependencies(text)


def test_a_multi_line_block_reads_the_same():
    text = ('# /// script\n# dependencies = [\n#   "nox>=2025.2.9",\n#   "PyYAML",\n# ]\n#\n'
            '# ///\n')
    assert bootstrap.script_dependencies(text) == ("nox", "pyyaml")


def test_nox_reads_the_block():
    if not BOOTSTRAP_PYTHON.exists():
        pytest.skip("no .nox/_bootstrap (python3 ci/bootstrap.py makes it)")
    code = "import nox.project; print(nox.project.load_toml('noxfile.py')['dependencies'])"
    done = subprocess.run([str(BOOTSTRAP_PYTHON), "-c", code], cwd=REPO, capture_output=True,
                          text=True, check=True)
    assert done.stdout.strip() == str([str(r) for r in block_dependencies()])
