"""opforge's fuzzing: a coverage-guided engine for g++ (driver.cpp), atheris for Python targets,
and the runner `python -m fuzz` (see fuzz/README.md)."""
from __future__ import annotations


class Unavailable(Exception):
    """Raised by a target's build.py when something it needs is missing on this host."""
