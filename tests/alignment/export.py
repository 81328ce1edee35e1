"""Torch side of the alignment (torch venv): layer 1, then the layer-2 export folder.

  python tests/alignment/export.py --out DIR [--opset 18] [--ir-version 8]

The same as `opforge-align export` (the matrix's export stage runs this file).
"""
import sys

import _package  # noqa: F401

from opforge_align.cli import main

if __name__ == "__main__":
    sys.exit(main(["export", *sys.argv[1:]]))
