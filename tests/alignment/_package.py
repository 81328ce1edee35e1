"""Makes `opforge_align` importable for the scripts and tests here: the installed package (what
users run), else the source tree's packages/align/src (a venv the package was not installed in).
COMMAND runs the tool the same way in a child process."""
import sys
from pathlib import Path

SOURCES = Path(__file__).resolve().parents[2] / "packages" / "align" / "src"

try:
    import opforge_align

    COMMAND = [sys.executable, "-m", "opforge_align"]
except ImportError:
    sys.path.insert(0, str(SOURCES))
    import opforge_align  # noqa: F401

    COMMAND = [sys.executable, str(SOURCES / "opforge_align" / "__main__.py")]
