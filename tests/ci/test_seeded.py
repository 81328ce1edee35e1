"""Every random draw the test suite makes is seeded, so a verdict never depends on the run (issue 28:
an unseeded torch.randn failed a fresh clone's matrix). ast over every Python file of the test
folders, of bench/ (its numbers and agreement checks come from the suite's and the matrix's runs)
and of the helpers the tests run from a package (HELPERS), and over the code strings they hand to a
subprocess: a draw passes its generator (torch: `generator=`; numpy: a `np.random.default_rng(SEED)`;
random: a `random.Random(SEED)`) or follows a seed call (torch.manual_seed, np.random.seed,
random.seed) earlier in its function, in a function around it, or at module level for a draw at
module level (a module's seed is spent by whichever test draws first). hypothesis runs only
derandomized."""
from __future__ import annotations

import ast
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FOLDERS = ("bench", "fuzz/tests", "kernels/tests", "packages/*/tests", "tests")
HELPERS = ("packages/align/src/opforge_align/harness",)  # tests/alignment/export.py runs it

TORCH_DRAWS = {"rand", "rand_like", "randint", "randint_like", "randn", "randn_like", "randperm",
               "normal", "bernoulli", "multinomial", "poisson"}
# in-place draws on a tensor, and torch.nn.init's (uniform_, normal_, ... take generator= too)
TENSOR_DRAWS = {"uniform_", "normal_", "random_", "bernoulli_", "cauchy_", "exponential_",
                "geometric_", "log_normal_", "trunc_normal_", "kaiming_uniform_", "kaiming_normal_",
                "xavier_uniform_", "xavier_normal_", "orthogonal_", "sparse_"}
# torch.nn layers that draw their initial parameters from torch's global generator
RANDOM_INIT = {"Linear", "Bilinear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d",
               "ConvTranspose2d", "ConvTranspose3d", "Embedding", "EmbeddingBag", "RNN", "LSTM",
               "GRU", "MultiheadAttention", "Transformer", "TransformerEncoderLayer",
               "TransformerDecoderLayer"}
# numpy.random names that make a generator (seeded when given an argument) rather than draw
NUMPY_MAKERS = {"default_rng", "Generator", "RandomState", "SeedSequence", "PCG64", "PCG64DXSM",
                "Philox", "SFC64", "MT19937", "BitGenerator"}
SEEDS = {"torch.manual_seed": "torch", "torch.random.manual_seed": "torch",
         "torch.cuda.manual_seed": "torch", "torch.cuda.manual_seed_all": "torch",
         "numpy.random.seed": "numpy", "random.seed": "random"}
SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef)


def _aliases(tree: ast.AST) -> dict[str, str]:
    """Local name -> the dotted name it was imported as."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                names[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname \
                    else alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def _dotted(node: ast.AST, aliases: dict[str, str]) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([aliases.get(node.id, node.id), *reversed(parts)])


def _unseeded(call: ast.Call, name: str | None) -> str | None:
    """What kind of seed the call's draw needs ("torch", "numpy", "random"), None when it needs
    none or brings its own."""
    keywords = {k.arg: k.value for k in call.keywords}
    has_generator = "generator" in keywords and not (
        isinstance(keywords["generator"], ast.Constant) and keywords["generator"].value is None)
    given = bool(call.args) and not (isinstance(call.args[0], ast.Constant)
                                     and call.args[0].value is None)
    if isinstance(call.func, ast.Attribute) and call.func.attr in TENSOR_DRAWS:
        return None if has_generator else "torch"
    if name is None:
        return None
    head, _, last = name.rpartition(".")
    if (head == "torch" and last in TORCH_DRAWS) or (head == "torch.nn" and last in RANDOM_INIT):
        return None if has_generator else "torch"
    if head == "numpy.random":
        if last in NUMPY_MAKERS:
            return None if given or "seed" in keywords else "numpy"
        return None if last == "seed" else "numpy"
    if name == "random.Random":
        return None if given else "random"
    if head == "random" and last != "seed":
        return "random"
    return None


def unseeded_draws(source: str, path: str = "<code>", first_line: int = 1) -> list[str]:
    """`path:line: what` for every unseeded draw of `source` (and of the code strings in it)."""
    tree = ast.parse(source)
    aliases = _aliases(tree)
    found = []

    def visit(node: ast.AST, seeded: set[str], module_level: bool) -> set[str]:
        """Walks `node` in source order; returns the seeds called so far in the same scope."""
        for child in ast.iter_child_nodes(node):
            if isinstance(child, SCOPES):
                for decorator in child.decorator_list:
                    visit(decorator, seeded, module_level)
                visit(child, set() if module_level else set(seeded), False)
                continue
            seeded = visit(child, seeded, module_level)
            if isinstance(child, ast.Call):
                name = _dotted(child.func, aliases)
                if name in SEEDS:
                    seeded = seeded | {SEEDS[name]}
                need = _unseeded(child, name)
                if need and need not in seeded:
                    what = name or f".{child.func.attr}"
                    found.append(f"{path}:{first_line + child.lineno - 1}: {what} draws unseeded "
                                 f"(pass a generator, or seed {need} before it)")
            elif isinstance(child, ast.Constant) and isinstance(child.value, str) and "\n" in child.value:
                try:  # code handed to a subprocess: checked as a module of its own
                    found.extend(unseeded_draws(textwrap.dedent(child.value), path,
                                                first_line + child.lineno - 1))
                except SyntaxError:
                    pass
        return seeded

    visit(tree, set(), True)
    if "hypothesis" in {name.split(".")[0] for name in aliases.values()} \
            and "derandomize=True" not in source:
        found.append(f"{path}: uses hypothesis without derandomize=True")
    return found


def checked_files() -> list[Path]:
    files = set()
    for pattern in (*FOLDERS, *HELPERS):
        for folder in REPO.glob(pattern):
            files.update(p for p in folder.rglob("*.py") if "build" not in p.relative_to(REPO).parts)
    return sorted(files)


def test_every_random_draw_of_the_tests_is_seeded():
    files = [path for path in checked_files() if path != Path(__file__).resolve()]  # PLANTED's
    assert len(files) > 100 and REPO / "packages/torch_ext/tests/test_geglu.py" in files
    found = [line for path in files
             for line in unseeded_draws(path.read_text(), str(path.relative_to(REPO)))]
    assert not found, "unseeded random draws:\n" + "\n".join(found)


PLANTED = '''
import random
import numpy as np
import torch
from torch import randn

X = torch.randn(3)                          # unseeded: module level, before any seed
GEN = torch.Generator().manual_seed(0)
Y = torch.rand(3, generator=GEN)


def test_a():
    a = randn(2)                            # unseeded: imported under its own name
    torch.manual_seed(0)
    b = torch.randn_like(a)
    c = torch.empty(3).uniform_(-1, 1)
    d = torch.nn.Linear(2, 2)
    rng = np.random.default_rng()           # unseeded: no seed
    e = np.random.default_rng(3).normal(size=3)
    f = np.random.randn(3)                  # unseeded: the legacy global state
    g = random.choice([1, 2])               # unseeded: Python's global generator
    return random.Random(4).random()


def test_b():
    a = torch.randn(2, generator=None)      # unseeded: no generator after all
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.rand(4))       # unseeded: the test seeds after it
    torch.manual_seed(1)
    np.random.seed(1)
    random.seed(1)
    return M(), np.random.permutation(3), random.random(), torch.empty(2).normal_(generator=GEN)


SCRIPT = """
import torch
x = torch.rand(11)                          # unseeded: code run in a subprocess
"""
'''


def test_the_check_finds_each_kind_of_unseeded_draw():
    lines = sorted(int(line.split(":")[1]) for line in unseeded_draws(PLANTED))
    assert lines == [n for n, line in enumerate(PLANTED.splitlines(), 1) if "# unseeded" in line]
