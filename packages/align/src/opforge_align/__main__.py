"""`python -m opforge_align ...` (= the `opforge-align` console script).

Also runnable as a file from a source tree (`python packages/align/src/opforge_align/__main__.py
...`, what the matrix stages run): then the tree's sources are used, not an installed copy."""
import sys
from pathlib import Path

if not __package__:  # run as a file: import the package from the folder above, not by its files
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    sys.path.insert(0, str(here.parent))

from opforge_align.cli import main

if __name__ == "__main__":
    sys.stdout.flush()
    sys.exit(main())
