"""Run nox at the version matrix.yaml pins, from a private venv: `python3 ci/bootstrap.py -s matrix`.

Works on a bare machine with Python >= 3.9 (standard library only): reads `tools:` of matrix.yaml
line by line (no YAML parser yet), makes .nox/_bootstrap with the pinned nox and PyYAML once,
then hands every argument to that nox.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import venv
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VENV = REPO / ".nox" / "_bootstrap"
NEEDED = ("nox", "pyyaml")


def tool_pins(text: str) -> dict[str, str]:
    """`name: "version"` lines of the top-level `tools:` block."""
    pins, inside = {}, False
    for line in text.splitlines():
        if re.match(r"^tools:\s*(#.*)?$", line):
            inside = True
            continue
        if inside and re.match(r"^\S", line):
            break
        found = re.match(r"^\s+([A-Za-z0-9_.-]+):\s*\"([^\"]+)\"", line) if inside else None
        if found:
            pins[found.group(1)] = found.group(2)
    return pins


def main(argv: list[str]) -> int:
    pins = tool_pins((REPO / "matrix.yaml").read_text())
    missing = [name for name in NEEDED if name not in pins]
    if missing:
        print(f"matrix.yaml: tools: missing pin for {', '.join(missing)} "
              f'(expected lines like `  nox: "2026.10.20"`)', file=sys.stderr)
        return 2
    requirements = [f"{name}=={pins[name]}" for name in NEEDED]
    marker = VENV / ".opforge-requirements"
    python = VENV / "bin" / "python"
    if not (marker.is_file() and marker.read_text() == " ".join(requirements) and python.exists()):
        print(f"bootstrap: installing {' '.join(requirements)} into {VENV.relative_to(REPO)}",
              file=sys.stderr, flush=True)
        venv.EnvBuilder(with_pip=True, clear=True).create(VENV)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet",
                        "--disable-pip-version-check", *requirements], check=True)
        marker.write_text(" ".join(requirements))
    os.chdir(REPO)
    os.execv(str(python), [str(python), "-m", "nox", *argv])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
