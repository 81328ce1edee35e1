"""A package's sdist, the one thing its wheel is built from (the matrix and the release both).

`python -m build --sdist` in isolation, with opforge-spec (kernels/, not on PyPI) found through
PIP_FIND_LINKS; torch_ext's setup.py imports torch even to list its sources, so its sdist is made
without isolation in a venv that has torch and `build`, as its README says.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

# folders whose setup.py needs the venv's torch to make the sdist
NEEDS_TORCH = ("torch_ext",)

Run = Callable[[list[str], Mapping[str, str]], int]   # (argv, extra env) -> exit code


class SdistError(RuntimeError):
    """`python -m build --sdist` of a folder failed or left no single .tar.gz."""


def needs_torch(folder: Path) -> bool:
    return folder.name in NEEDS_TORCH


def find_links(*folders: str) -> str:
    """PIP_FIND_LINKS with opforge-spec's folder first, the caller's own (a local torch) after."""
    return " ".join(filter(None, [*folders, os.environ.get("PIP_FIND_LINKS", "")]))


def make_sdist(python: Path, folder: Path, outdir: Path, run: Run, *, links: str) -> Path:
    """The sdist of `folder` in `outdir` (made there, with `python`'s `build`)."""
    outdir.mkdir(parents=True, exist_ok=True)
    before = set(outdir.glob("*.tar.gz"))
    isolation = ["--no-isolation", "--skip-dependency-check"] if needs_torch(folder) else []
    code = run([str(python), "-m", "build", "--sdist", *isolation, "--outdir", str(outdir),
                str(folder)], {"PIP_FIND_LINKS": links})
    made = sorted(set(outdir.glob("*.tar.gz")) - before)
    if code != 0 or len(made) != 1:
        raise SdistError(f"{folder.name}: `python -m build --sdist` failed (exit {code}, "
                         f"{len(made)} sdists made; see the log)")
    return made[0]
