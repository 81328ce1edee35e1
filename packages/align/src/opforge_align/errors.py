"""The one error type of the tool: something the user can fix (a file, an argument, a runtime that
is not installed). The CLI prints it as one line and exits 2; anything else is a bug."""
from __future__ import annotations


class AlignError(Exception):
    """A refusal with a one-line message naming the file or argument and what was expected."""
