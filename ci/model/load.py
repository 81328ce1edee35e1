"""Load matrix.yaml: read it bounded, validate it by its declared schema (ci/model/schema.py) and
expand every profile once, so any problem is ONE line, `matrix.yaml: <key path>: <problem>`,
raised as MatrixError before anything runs.

    python -m ci.matrix check                 # validate (exit 2 with the line on a problem)
    python -m ci.matrix cells [--profile host] [--excluded]
"""
from __future__ import annotations

import argparse
import stat
import sys
from pathlib import Path
from typing import Any

from ci.model.errors import MatrixError
from ci.model.expand import check_profile, expand
from ci.model.matrix import MATRIX, Matrix
from ci.model.validate import validate
from ci.model.yaml_input import MAX_BYTES, decode, read_yaml


def load(path: Path = MATRIX) -> Matrix:
    """Read and validate matrix.yaml (all profiles expanded once); raise MatrixError."""
    path = Path(path)
    try:
        return from_bytes(_read_bounded(path), path)
    except MatrixError as exc:
        if path.name != "matrix.yaml":
            raise MatrixError(exc.where, exc.problem, path.name) from None
        raise


def from_bytes(data: bytes, path: Path = MATRIX) -> Matrix:
    """The validated Matrix of a matrix file's bytes; raise MatrixError."""
    return parse(read_yaml(decode(data)), path)


def _read_bounded(path: Path) -> bytes:
    """At most MAX_BYTES + 1 bytes; a FIFO or device is refused unopened (it may never end)."""
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            raise MatrixError("", "cannot read: not a regular file")
        with path.open("rb") as file:
            return file.read(MAX_BYTES + 1)
    except OSError as exc:
        raise MatrixError("", f"cannot read: {exc.strerror}") from None


def parse(data: Any, path: Path = MATRIX) -> Matrix:
    """The Matrix of matrix.yaml's data, validated by its declared schema (ci/model/schema.py)."""
    spec = validate(data)
    matrix = Matrix(path, data, spec.axes(), dict(spec.settings), spec.rules, dict(spec.stages),
                    dict(spec.profiles), dict(spec.toolkits))
    for name in matrix.profiles:
        check_profile(matrix, name)
    return matrix



def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ci.matrix", description=__doc__.splitlines()[0])
    parser.add_argument("--matrix", type=Path, default=MATRIX)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("check", help="validate matrix.yaml")
    cells_cmd = sub.add_parser("cells", help="list the cells of a profile")
    cells_cmd.add_argument("--profile", default="host")
    cells_cmd.add_argument("--excluded", action="store_true", help="also list excluded combinations")
    args = parser.parse_args(argv)
    try:
        matrix = load(args.matrix)
        if args.command == "check":
            counts = ", ".join(f"{p}: {len(expand(matrix, p)[0])} cells" for p in matrix.profiles)
            print(f"{args.matrix.name}: ok ({counts})")
            return 0
        cells, excluded = expand(matrix, args.profile)
        for cell in cells:
            print(cell.id)
        if args.excluded:
            for item in excluded:
                print(f"excluded: {item.id}: {item.by} ({item.condition})")
    except MatrixError as exc:
        print(exc, file=sys.stderr)
        return 2
    return 0
