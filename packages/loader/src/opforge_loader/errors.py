from __future__ import annotations


class OpforgeError(RuntimeError):
    """A refused load, a failed call or a bad argument; str() is the host's message."""

    def __init__(self, message: str, status: int = 0):
        super().__init__(message)
        self.status = status
