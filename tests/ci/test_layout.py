"""ci/ as layers: the import graph of its modules (ast over every file) has no circle, nor has the
graph of its layers (its subpackages and top-level modules: engine and report, provision and
generate imported each other, module by module without a circle), no module is
longer than MAX_LINES, and an import of ci inside a function says why in a comment (everything
else imports at the top of a module, where a reader looks)."""
from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MAX_LINES = 450
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


@dataclasses.dataclass(frozen=True)
class Import:
    source: str          # the importing module
    target: str          # the ci module imported
    line: int
    in_function: bool


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path) -> dict[str, Path]:
    """Every module of the package `ci` under root, by its dotted name."""
    return {module_name(path, root): path for path in sorted((root / "ci").rglob("*.py"))}


def _targets(node: ast.AST, known: set[str]) -> list[str]:
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        names = [f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in known
                 else node.module for alias in node.names]
    else:
        return []
    return [name for name in names if name == "ci" or name.startswith("ci.")]


def imports(name: str, path: Path, known: set[str]) -> list[Import]:
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for target in _targets(node, known):
            found.append(Import(name, target, node.lineno, in_function))
        for child in ast.iter_child_nodes(node):
            visit(child, in_function or isinstance(node, FUNCTIONS))

    visit(ast.parse(path.read_text(), str(path)), False)
    return found


def graph(root: Path) -> tuple[dict[str, Path], list[Import]]:
    found = modules(root)
    return found, [i for name, path in found.items() for i in imports(name, path, set(found))]


def circle(edges: list[Import]) -> list[str] | None:
    """One import circle (its modules, the first repeated at the end), or None."""
    after: dict[str, set[str]] = {}
    for edge in edges:
        if edge.target != edge.source:
            after.setdefault(edge.source, set()).add(edge.target)
    state: dict[str, str] = {}
    path: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for nxt in sorted(after.get(node, ())):
            if state.get(nxt) == "open":
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := walk(nxt)):
                return found
        state[node] = "done"
        path.pop()
        return None

    for node in sorted(after):
        if node not in state and (found := walk(node)):
            return found
    return None


def says_why(lines: list[str], number: int) -> bool:
    """A comment beyond `# noqa: CODE` on the import's line, or a comment line just above it."""
    own = lines[number - 1].split("#", 1)
    comment = own[1].strip() if len(own) == 2 else ""
    if comment and (not comment.startswith("noqa") or "(" in comment):   # a reason after noqa
        return True
    return any(line.strip().startswith("#") for line in lines[max(0, number - 4):number - 1])


def unexplained(found: dict[str, Path], edges: list[Import]) -> list[str]:
    texts = {name: path.read_text().splitlines() for name, path in found.items()}
    return [f"{found[e.source].relative_to(REPO) if found[e.source].is_relative_to(REPO) else found[e.source]}"
            f":{e.line}: imports {e.target} inside a function without a comment saying why"
            for e in edges if e.in_function and not says_why(texts[e.source], e.line)]


def too_long(found: dict[str, Path]) -> list[str]:
    return [f"{name}: {n} lines (at most {MAX_LINES})" for name, path in found.items()
            if (n := len(path.read_text().splitlines())) > MAX_LINES]


def layer(module: str) -> str:
    """ci.engine.runner -> ci.engine: a subpackage of ci or a top-level module."""
    return ".".join(module.split(".")[:2])


def between_layers(edges: list[Import]) -> list[Import]:
    """The imports from one layer into another, as edges between the layers."""
    return [dataclasses.replace(e, source=layer(e.source), target=layer(e.target)) for e in edges
            if layer(e.source) != layer(e.target)]


# ------------------------------------------------------------------------------------ ci itself


def test_ci_has_no_import_circle():
    _, edges = graph(REPO)
    assert circle(edges) is None, " -> ".join(circle(edges))


def test_ci_layers_import_each_other_one_way():
    _, edges = graph(REPO)
    found = circle(between_layers(edges))
    assert found is None, " -> ".join(found or [])


def test_no_ci_module_is_longer_than_the_limit():
    found, _ = graph(REPO)
    assert not too_long(found)


def test_every_import_of_ci_inside_a_function_says_why():
    found, edges = graph(REPO)
    assert not unexplained(found, edges)


def test_the_model_imports_no_other_layer():
    _, edges = graph(REPO)
    outside = [e for e in edges if e.source.startswith("ci.model")
               and not e.target.startswith("ci.model")]
    assert not outside, outside


# ------------------------------------------------------------------------ the checks themselves


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def test_a_circle_is_found_and_named(tmp_path):
    write(tmp_path, {"ci/__init__.py": "", "ci/a/__init__.py": "",
                     "ci/a/one.py": "from ci.a import two\n",
                     "ci/a/two.py": "import ci.three\n",
                     "ci/three.py": "def f():\n    # late: the circle still counts\n"
                                    "    from ci.a import one\n"})
    _, edges = graph(tmp_path)
    assert circle(edges) == ["ci.a.one", "ci.a.two", "ci.three", "ci.a.one"]


def test_a_circle_of_layers_is_found_where_the_modules_have_none(tmp_path):
    """engine's runner imports report, report imports engine's result (which imports nothing)."""
    write(tmp_path, {"ci/__init__.py": "", "ci/engine/__init__.py": "", "ci/report/__init__.py": "",
                     "ci/engine/result.py": "PASS = 'pass'\n",
                     "ci/engine/runner.py": "from ci.report import report\n",
                     "ci/report/report.py": "from ci.engine.result import PASS\n"})
    _, edges = graph(tmp_path)
    assert circle(edges) is None
    assert circle(between_layers(edges)) == ["ci.engine", "ci.report", "ci.engine"]


def test_a_package_import_is_an_edge_to_the_package_not_a_circle(tmp_path):
    write(tmp_path, {"ci/__init__.py": "", "ci/m/__init__.py": "from ci.m.x import y\n",
                     "ci/m/x.py": "y = 1\n", "ci/z.py": "from ci import m\n"})
    _, edges = graph(tmp_path)
    assert circle(edges) is None
    assert {(e.source, e.target) for e in edges} == {("ci.m", "ci.m.x"), ("ci.z", "ci.m")}


@pytest.mark.parametrize("body, ok", [
    ("def f():\n    from ci import x\n", False),
    ("def f():\n    from ci import x  # noqa: PLC0415\n", False),
    ("def f():\n    from ci import x  # noqa: PLC0415  (x reads pydantic: f runs without it)\n", True),
    (("def f():\n    # x reads pydantic; f runs where only the standard library is\n"
      "    from ci import x  # noqa: PLC0415\n"), True),
    ("from ci import x\n", True),
    ("def f():\n    import json\n", True),
])
def test_an_import_of_ci_in_a_function_needs_a_comment(tmp_path, body, ok):
    write(tmp_path, {"ci/__init__.py": "", "ci/x.py": "", "ci/y.py": body})
    found, edges = graph(tmp_path)
    assert (not unexplained(found, edges)) == ok


def test_a_long_module_is_named(tmp_path):
    write(tmp_path, {"ci/__init__.py": "", "ci/long.py": "x = 1\n" * (MAX_LINES + 1)})
    found, _ = graph(tmp_path)
    assert too_long(found) == [f"ci.long: {MAX_LINES + 1} lines (at most {MAX_LINES})"]
