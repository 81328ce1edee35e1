from __future__ import annotations

import os


class OpforgeError(RuntimeError):
    """A refused load, a failed call or a bad argument; str() is the host's message."""

    def __init__(self, message: str, status: int = 0):
        super().__init__(message)
        self.status = status


class ManifestError(OpforgeError):
    """A manifest Python cannot use: unreadable, not a regular file, too large, not JSON, or not
    shaped like manifest.schema.json. str() is one line naming the file and the problem."""

    def __init__(self, path: str | os.PathLike, problem: str):
        super().__init__(f"opforge-loader: {printable(os.fspath(path))}: {printable(problem)}")
        self.path = os.fspath(path)
        self.problem = problem


MAX_SHOWN = 400


def printable(text: str) -> str:
    """text as one readable line, like the host's messages: control characters as \\xNN (a
    manifest's values are echoed into errors, and a newline in one must not forge a second line),
    long text cut to its start plus its length."""
    escaped = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" if ord(c) < 0x100
                      else f"\\u{ord(c):04x}" for c in text)
    if len(escaped) <= MAX_SHOWN:
        return escaped
    return f"{escaped[:MAX_SHOWN]}... ({len(escaped)} characters)"
