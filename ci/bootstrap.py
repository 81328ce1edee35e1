"""Run nox at the version matrix.yaml pins, from a private venv: `python3 ci/bootstrap.py -s matrix`.

Works on a bare machine with Python >= 3.9 (standard library only): reads what the noxfile needs
from its script block (`# /// script`, PEP 723: nox, PyYAML, packaging, pydantic — what ci/ reads
matrix.yaml with), their pins from `tools:` of matrix.yaml line by line (no YAML parser yet),
checks every pin, makes .nox/_bootstrap with them once, then hands every argument to that nox. A problem is one line
`matrix.yaml: <where>: <problem>` and exit code 2, found before the venv is touched.
"""
from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
import venv
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VENV = REPO / ".nox" / "_bootstrap"
NOXFILE = REPO / "noxfile.py"
MAX_BYTES = 256 * 1024     # the limit ci/model/yaml_input.py applies to the same file

# A strict subset of what ci/model/ accepts (canonical PEP 440, checked with `packaging`,
# which is not installed yet here): a project name and a plain release, pre, post or dev version.
NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
VERSION = re.compile(r"(?:0|[1-9]\d*)(?:\.(?:0|[1-9]\d*))*(?:(?:a|b|rc)(?:0|[1-9]\d*))?"
                     r"(?:\.post(?:0|[1-9]\d*))?(?:\.dev(?:0|[1-9]\d*))?")
PIN_LINE = re.compile(r"^\s+(" + NAME + r"):\s*\"([^\"]*)\"\s*(?:#.*)?$")
BLOCK_START = re.compile(r"^tools:\s*(?:#.*)?$")
SCRIPT_BLOCK = re.compile(r"^# /// script\n((?:#(?: .*)?\n)*?)# ///$", re.MULTILINE)
DEPENDENCIES = re.compile(r"^dependencies\s*=\s*\[(.*?)\]", re.MULTILINE | re.DOTALL)
DEPENDENCY = re.compile(r"[\"'](" + NAME + r")[^\"']*[\"']")


class BootstrapError(Exception):
    """A problem with matrix.yaml's `tools:`; str() is the one line to print."""

    def __init__(self, where: str, problem: str):
        super().__init__(f"matrix.yaml: {where}: {problem}")


def script_dependencies(text: str) -> tuple[str, ...]:
    """The project names of `dependencies` in a PEP 723 `# /// script` block, in order."""
    block = SCRIPT_BLOCK.search(text)
    if block is None:
        raise ValueError("no `# /// script` block (PEP 723)")
    toml = "\n".join(line[2:] for line in block.group(1).splitlines())
    found = DEPENDENCIES.search(toml)
    if found is None:
        raise ValueError("its `# /// script` block has no `dependencies = [...]`")
    return tuple(_canonical(item.group(1)) for item in DEPENDENCY.finditer(found.group(1)))


def read_bytes(path: Path) -> bytes:
    """At most MAX_BYTES + 1 bytes of a regular file (a FIFO or device is refused unopened)."""
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            raise BootstrapError("file", "not a regular file")
        with path.open("rb") as file:
            return file.read(MAX_BYTES + 1)
    except OSError as exc:
        raise BootstrapError("file", f"cannot read: {exc.strerror}") from None


def decode(data: bytes) -> str:
    if len(data) > MAX_BYTES:
        raise BootstrapError("file", f"larger than the {MAX_BYTES // 1024} KiB a matrix file may have")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - data.rfind(b"\n", 0, exc.start)
        raise BootstrapError(f"line {line}, column {column}",
                             f"not UTF-8 text (byte 0x{data[exc.start]:02x})") from None


def tool_pins(text: str) -> dict[str, str]:
    """`name: "version"` lines of the top-level `tools:` block, each checked."""
    pins: dict[str, str] = {}
    inside = False
    for number, line in enumerate(text.splitlines(), 1):
        if BLOCK_START.match(line):
            inside = True
            continue
        if not inside or not line.strip() or line.lstrip().startswith("#"):
            continue
        if re.match(r"^\S", line):
            break
        name, version = _pin(line, number, pins)
        pins[name] = version
    return pins


def _pin(line: str, number: int, earlier: dict[str, str]) -> tuple[str, str]:
    found = PIN_LINE.match(line)
    if not found:
        raise BootstrapError(f"line {number}", 'expected `  name: "version"` in tools:, got '
                             f"{_short(line)!r}")
    name, version = found.groups()
    if not VERSION.fullmatch(version):
        raise BootstrapError(f"tools.{name}", f'expected a version such as "2026.10.20", got '
                             f"{_short(version)!r}")
    if _canonical(name) in map(_canonical, earlier):
        raise BootstrapError(f"tools.{name}", "pinned twice")
    return name, version


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _short(text: str) -> str:
    return text if len(text) <= 80 else text[:80] + "..."


NEEDED = script_dependencies(NOXFILE.read_text())   # what the noxfile imports to list its sessions


def read_requirements(data: bytes) -> list[str]:
    """matrix.yaml's bytes -> the pins bootstrap installs (`nox==...`, `pyyaml==...`)."""
    pins = tool_pins(decode(data))
    missing = [name for name in NEEDED if name not in pins]
    if missing:
        raise BootstrapError("tools", f"missing pin for {', '.join(missing)} "
                             f'(expected lines like `  nox: "2026.10.20"`)')
    return [f"{name}=={pins[name]}" for name in NEEDED]


def ensure_venv(requirements: list[str]) -> Path:
    """.nox/_bootstrap with exactly these pins; the marker is written only once pip succeeded."""
    marker = VENV / ".opforge-requirements"
    python = VENV / "bin" / "python"
    if marker.is_file() and marker.read_text() == " ".join(requirements) and python.exists():
        return python
    print(f"bootstrap: installing {' '.join(requirements)} into {VENV.relative_to(REPO)}",
          file=sys.stderr, flush=True)
    venv.EnvBuilder(with_pip=True, clear=True).create(VENV)
    done = subprocess.run([str(python), "-m", "pip", "install", "--quiet",
                           "--disable-pip-version-check", *requirements])
    if done.returncode != 0:
        raise SystemExit(f"bootstrap: pip install {' '.join(requirements)} failed (exit "
                         f"{done.returncode}); {VENV.relative_to(REPO)} is rebuilt on the next run")
    marker.write_text(" ".join(requirements))
    return python


def main(argv: list[str]) -> int:
    try:
        requirements = read_requirements(read_bytes(REPO / "matrix.yaml"))
    except BootstrapError as exc:
        print(exc, file=sys.stderr)
        return 2
    python = ensure_venv(requirements)
    os.chdir(REPO)
    os.execv(str(python), [str(python), "-m", "nox", *argv])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
