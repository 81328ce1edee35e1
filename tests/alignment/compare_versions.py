"""Cross-version alignment: the same ONNX files in several ONNX Runtime releases.

  python tests/alignment/compare_versions.py --results DIR1 DIR2 [...] --out DIR

Each DIRn is check_ort.py's --out for one ORT venv, all from the same export folder (one argument
may also hold several folders separated by os.pathsep). Needs numpy only. Writes DIR/cross_version.{json,md} and the stage result; exit 1 if a check failed.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from opforge_align import cross
from opforge_align.stage import exit_with, finish


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", nargs="+", required=True,
                        help=f"folders; one argument may also hold several, '{os.pathsep}'-separated")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    folders = [Path(p) for arg in args.results for p in arg.split(os.pathsep) if p]
    results = cross.compare(folders)
    return finish(results, out=args.out, name="cross_version",
                  title="opforge alignment: across ONNX Runtime versions")


if __name__ == "__main__":
    exit_with(main())
