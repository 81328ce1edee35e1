"""Cross-version alignment: the same ONNX files in several ONNX Runtime releases.

  python tests/alignment/compare_versions.py --results DIR1 DIR2 [...] --out DIR

The same as `opforge-align cross` (the matrix's cross stage runs this file).
"""
import sys

import _package  # noqa: F401

from opforge_align.cli import main

if __name__ == "__main__":
    sys.exit(main(["cross", *sys.argv[1:]]))
