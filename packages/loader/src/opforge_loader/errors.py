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
        super().__init__(f"opforge-loader: {os.fspath(path)}: {problem}")
        self.path = os.fspath(path)
        self.problem = problem
