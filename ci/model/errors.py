"""MatrixError: a problem in matrix.yaml as ONE line, `matrix.yaml: <where>: <problem>`."""
from __future__ import annotations

from typing import Any

from pydantic_core import PydanticCustomError

MAX_SHOWN = 300                  # characters of an input value quoted in a message


class MatrixError(ValueError):
    """A problem in matrix.yaml; str() is the one line to print."""

    def __init__(self, where: str, problem: str, file: str = "matrix.yaml"):
        where, problem = _one_line(where, MAX_SHOWN), _one_line(problem, 3 * MAX_SHOWN)
        self.where, self.problem = where, problem
        super().__init__(f"{file}: {where}: {problem}" if where else f"{file}: {problem}")


def _one_line(text: str, limit: int) -> str:
    """Input quoted in a message may hold newlines, control characters or a megabyte of text."""
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text)[:limit + 1])
    return text if len(text) <= limit else text[:limit] + "..."


def show(value: Any) -> str:
    return f"{type(value).__name__} {value!r}" if not isinstance(value, str) else repr(value)


def refuse(problem: str, at: Any = None) -> PydanticCustomError:
    """A problem at the value being validated (or at its key or index `at`)."""
    return PydanticCustomError("matrix", "{problem}", {"problem": problem, "at": at})
