"""Every `pip install` / `pip wheel` of every README's ```bash blocks gets the build inputs its
packages cannot do without, ONNX Runtime's headers from the one documented command; and that
command works and prints a folder of headers the ORT plugin builds with."""
from __future__ import annotations

import re
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_sdist_filename

from ci import bootstrap

REPO = Path(__file__).resolve().parents[2]
BOOTSTRAP = "python3 ci/bootstrap.py"  # makes .nox/_bootstrap, the venv ci/ runs in
ORT_HEADERS = f"{bootstrap.VENV.relative_to(REPO)}/bin/python -m ci.debian --ort-include"
ORT_HEADERS_VALUE = f"$({ORT_HEADERS})"
# project -> the inputs its build stops without, in a checkout (packages/*/README.md, "required")
NEEDS = {"opforge-ort": {"OPFORGE_ORT_INCLUDE_DIR"}, "opforge-trt": {"OPFORGE_CUDA_HOME"}}
# ... and from its sdist, outside the checkout: the shared kernels too, from its build requirement
# opforge-spec (not on PyPI: a --find-links folder holds its wheel) or OPFORGE_KERNELS_INCLUDE_DIR
NEEDS_FROM_SDIST = {"opforge-ort", "opforge-trt", "opforge-loader", "opforge-torch"}
KERNELS = "OPFORGE_KERNELS_INCLUDE_DIR"
FIND_LINKS = {"-f", "--find-links"}
VALUES = {"OPFORGE_ORT_INCLUDE_DIR": ORT_HEADERS_VALUE}  # an input that may only take the documented value
OPTIONS_WITH_VALUE = {"-w", "--wheel-dir", "-d", "--dest", "-r", "--requirement", "-c", "--constraint",
                      "-i", "--index-url", "--extra-index-url", "-f", "--find-links", "-t", "--target",
                      "--prefix", "--root", "--config-settings", "-C", "--build-constraint",
                      "--cache-dir", "--log", "--src", "--platform", "--python-version", "--abi",
                      "--implementation", "--only-binary", "--no-binary", "--upgrade-strategy"}
SEPARATORS = {"&&", "||", ";", "|", "&"}
PUNCTUATION = ";&|()"
SHELL_TAGS = {"bash", "sh", "shell"}


def readmes() -> list[Path]:
    found = [REPO / "README.md", *REPO.glob("*/README.md"), *REPO.glob("*/*/README.md")]
    return sorted(p for p in found if p.relative_to(REPO).parts[0] not in {"build", ".nox", ".git"})


def fenced_blocks(readme: Path) -> list[tuple[str, int, str]]:
    """(tag, first line number, text) of every fenced code block."""
    text = readme.read_text()
    return [(m["tag"], text[:m.start()].count("\n") + 2, m["body"])
            for m in re.finditer(r"^```(?P<tag>[\w+-]*)\n(?P<body>.*?)^```", text, re.S | re.M)]


def shell_words(line: str) -> list[str]:
    """A line as shell words: shlex's, separators (`&&`, `;`, ...) as words of their own and each
    command substitution `$( ... )` as one word (its inner words joined by one space)."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=PUNCTUATION)
    lexer.whitespace_split, lexer.commenters = True, "#"
    tokens = []
    for token in lexer:  # shlex joins a run of punctuation ("))", ");"): split it again
        runs = [token] if token in ("&&", "||") or not set(token) <= set(PUNCTUATION) else list(token)
        tokens.extend(runs)
    words: list[str] = []
    depth = 0
    for token in tokens:
        if depth:
            depth += {"(": 1, ")": -1}.get(token, 0)
            words[-1] += token if token in ("(", ")") or words[-1].endswith("(") else f" {token}"
        elif token == "(" and words and words[-1].endswith("$"):
            depth, words[-1] = 1, words[-1] + "("
        else:
            words.append(token)
    return words


def commands(block: str) -> list[list[str]]:
    """The block's simple commands as words (continuation lines joined, comments dropped)."""
    found: list[list[str]] = [[]]
    for line in block.replace("\\\n", " ").splitlines():
        for word in shell_words(line):
            if word in SEPARATORS:
                found.append([])
            else:
                found[-1].append(word)
        found.append([])
    return [words for words in found if words]


ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def split_assignments(words: list[str]) -> tuple[dict[str, str], list[str]]:
    """(VAR=value words before the command, the command's words)."""
    count = next((i for i, w in enumerate(words) if not ASSIGNMENT.match(w)), len(words))
    return dict(w.split("=", 1) for w in words[:count]), words[count:]


def pip_arguments(command: list[str]) -> list[str] | None:
    """The arguments of `pip install|wheel ...` (pip, pip3, python[3] -m pip); None for others."""
    start = 1 if command[:1] in (["pip"], ["pip3"]) else 3 if (
        command[:1] in (["python"], ["python3"]) and command[1:3] == ["-m", "pip"]) else None
    if start is None or command[start:start + 1] not in (["install"], ["wheel"]):
        return None
    return command[start + 1:]


def projects_in_repo() -> dict[str, Path]:
    folders = [REPO / "kernels", *sorted((REPO / "packages").iterdir())]
    found = {}
    for folder in folders:
        if (folder / "pyproject.toml").is_file():
            name = tomllib.loads((folder / "pyproject.toml").read_text())["project"]["name"]
            found[canonicalize_name(name)] = folder
    return found


@dataclass
class Target:
    project: str            # canonical name
    folder: Path | None     # the package in the repo, for a local path or one of its sdists
    from_sdist: bool = False


@dataclass
class PipCommand:
    where: str
    targets: list[Target] = field(default_factory=list)
    no_build_isolation: bool = False
    find_links: bool = False


def parse_pip(where: str, arguments: list[str], cwd: Path) -> PipCommand:
    pip = PipCommand(where, no_build_isolation="--no-build-isolation" in arguments,
                     find_links=any(word in FIND_LINKS or word.startswith("--find-links=")
                                    for word in arguments))
    projects = projects_in_repo()
    folders = {folder: name for name, folder in projects.items()}
    skip_next = False
    for word in arguments:
        if skip_next or word.startswith("-"):
            skip_next = word in OPTIONS_WITH_VALUE
            continue
        if word.endswith(".tar.gz"):
            name = canonicalize_name(parse_sdist_filename(word)[0])
            pip.targets.append(Target(name, projects.get(name), from_sdist=True))
        elif word.startswith((".", "/")) or "/" in word:
            folder = (cwd / word).resolve()
            assert folder in folders, f"{where}: {word}: no package of the repository there"
            pip.targets.append(Target(folders[folder], folder))
        else:
            try:
                pip.targets.append(Target(canonicalize_name(Requirement(word).name), None))
            except InvalidRequirement:
                pytest.fail(f"{where}: {word!r}: neither a path, an sdist nor a requirement")
    return pip


@dataclass
class Block:
    where: str
    exported: dict[str, str] = field(default_factory=dict)
    installed: set[str] = field(default_factory=set)
    bootstrapped: bool = False
    problems: list[str] = field(default_factory=list)

    def value(self, inline: dict[str, str], name: str) -> str | None:
        value = inline.get(name, self.exported.get(name))
        if value in (f"${name}", f"${{{name}}}"):
            return self.exported.get(name)
        return value

    def check_inputs(self, pip: PipCommand, inline: dict[str, str]) -> None:
        for target in pip.targets:
            needed = set(NEEDS.get(target.project, ()))
            if target.from_sdist and target.project in NEEDS_FROM_SDIST and not pip.find_links:
                needed.add(KERNELS)
            for name in sorted(needed):
                value = self.value(inline, name)
                if not value:
                    self.problems.append(f"{pip.where}: {target.project} is built without {name}")
                elif name in VALUES and value != VALUES[name]:
                    self.problems.append(f"{pip.where}: {name}={value}: expected {ORT_HEADERS_VALUE}")

    def check_build_requirements(self, pip: PipCommand) -> None:
        """--no-build-isolation builds with what is installed: every build requirement first."""
        if not pip.no_build_isolation:
            return
        for target in pip.targets:
            if target.folder is None:
                continue
            pyproject = tomllib.loads((target.folder / "pyproject.toml").read_text())
            for text in pyproject["build-system"]["requires"]:
                if canonicalize_name(Requirement(text).name) not in self.installed:
                    self.problems.append(f"{pip.where}: {target.project} is built without isolation "
                                         f"before {text} is installed")


def check_block(readme: Path, line: int, text: str) -> list[str]:
    block = Block(f"{readme.relative_to(REPO)}:{line}")
    cwd = REPO
    for words in commands(text):
        inline, command = split_assignments(words)
        if any(ORT_HEADERS_VALUE in word for word in words) and not block.bootstrapped:
            block.problems.append(f"{block.where}: {ORT_HEADERS} runs before `{BOOTSTRAP}` made its venv")
        if command[:1] == ["export"]:
            block.exported.update(split_assignments(command[1:])[0])
        elif command[:1] == ["cd"] and len(command) == 2:
            cwd = cwd / command[1]
        elif " ".join(command).startswith(BOOTSTRAP):
            block.bootstrapped = True
        elif (arguments := pip_arguments(command)) is not None:
            pip = parse_pip(f"{block.where}: `{' '.join(words)}`", arguments, cwd)
            block.check_inputs(pip, inline)
            block.check_build_requirements(pip)
            block.installed |= {t.project for t in pip.targets}
    return block.problems


BLOCKS = [(readme, line, text) for readme in readmes()
          for tag, line, text in fenced_blocks(readme) if tag in SHELL_TAGS]


@pytest.mark.parametrize("readme,line,text", BLOCKS,
                         ids=[f"{r.relative_to(REPO)}:{n}" for r, n, _ in BLOCKS])
def test_every_install_line_gets_the_inputs_its_packages_need(readme, line, text):
    problems = check_block(readme, line, text)
    assert not problems, "\n".join(problems)


def _has_install_line(text: str) -> bool:
    for line in text.splitlines():
        try:
            found = commands(line)
        except ValueError:  # not shell (an unbalanced quote): no install line either
            continue
        if any(pip_arguments(split_assignments(words)[1]) is not None for words in found):
            return True
    return False


def test_every_install_line_is_in_a_shell_block():
    """An install line in an untagged block would escape the check above."""
    strays = [f"{readme.relative_to(REPO)}:{line}" for readme in readmes()
              for tag, line, text in fenced_blocks(readme) if not tag and _has_install_line(text)]
    assert not strays, f"install lines in untagged blocks (tag them ```bash): {', '.join(strays)}"


def test_the_check_sees_the_install_lines_of_the_built_packages():
    """The parser sees the install lines it is meant to check (a README rewritten into another
    shape would otherwise pass unchecked)."""
    seen = {t.project for readme, line, text in BLOCKS for words in commands(text)
            if (arguments := pip_arguments(split_assignments(words)[1])) is not None
            for t in parse_pip(f"{readme}:{line}", arguments, REPO).targets}
    assert {"opforge-ort", "opforge-trt", "opforge-torch", "opforge-align"} <= seen, seen


@pytest.mark.parametrize("line,problem", [
    ("pip install ./packages/ort_plugin", "opforge-ort is built without OPFORGE_ORT_INCLUDE_DIR"),
    ("OPFORGE_ORT_INCLUDE_DIR=/usr/include/onnxruntime pip install ./packages/ort_plugin",
     f"expected {ORT_HEADERS_VALUE}"),
    (f"export OPFORGE_ORT_INCLUDE_DIR={ORT_HEADERS_VALUE}\npip install ./kernels ./packages/ort_plugin",
     f"runs before `{BOOTSTRAP}` made its venv"),
    ("pip install opforge_trt-0.1.0.tar.gz", "opforge-trt is built without OPFORGE_CUDA_HOME"),
    ("OPFORGE_CUDA_HOME=/usr/local/cuda pip wheel opforge_trt-0.1.0.tar.gz",
     "opforge-trt is built without OPFORGE_KERNELS_INCLUDE_DIR"),
    ("pip install torch\npip install --no-build-isolation ./packages/torch_ext",
     "opforge-torch is built without isolation before setuptools"),
])
def test_the_check_catches_a_line_that_fails_on_a_fresh_machine(line, problem):
    problems = check_block(REPO / "README.md", 1, line + "\n")
    assert any(problem in p for p in problems), problems


def test_the_documented_ort_headers_command_prints_a_folder_the_plugin_builds_with():
    python = bootstrap.VENV / "bin" / "python"
    if not python.exists():
        pytest.skip(f"no {bootstrap.VENV.relative_to(REPO)}: `{BOOTSTRAP}` makes it (CI runs through it)")
    done = subprocess.run(shlex.split(ORT_HEADERS), cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    (folder,) = done.stdout.split()
    header = Path(folder) / "onnxruntime_c_api.h"
    floor = re.search(r"set\(OPFORGE_ORT_API_FLOOR (\d+)\)",
                      (REPO / "packages/ort_plugin/cmake/inputs.cmake").read_text())[1]
    version = re.search(r"^#define ORT_API_VERSION (\d+)", header.read_text(), re.M)[1]
    assert Path(folder).is_absolute() and int(version) >= int(floor), (folder, version)
