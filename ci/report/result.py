"""The core type of the stage engine: a stage's Result in one cell. Typed: status pass | fail |
skip, and the reason of a skip in its own field; report.json carries both as they are
(`"status": "skip", "reason": "no GPU"`), report.md and the progress lines show a skip as
`skipped: <reason>`."""
from __future__ import annotations

import dataclasses
from typing import Any

PASS, FAIL, SKIP = "pass", "fail", "skip"
STATUSES = (PASS, FAIL, SKIP)


@dataclasses.dataclass
class Result:
    """One stage of one cell: what happened (status; reason when skipped), its numbers and files."""
    status: str                        # pass | fail | skip
    duration_s: float = 0.0
    numbers: dict[str, Any] = dataclasses.field(default_factory=dict)
    artifacts: list[str] = dataclasses.field(default_factory=list)
    log: str | None = None
    detail: str = ""
    key: str = ""
    origin: str = "run"                # run | reused | cached | skip
    first_cell: int | None = None      # the cell whose run this result is
    outputs: dict[str, Any] = dataclasses.field(default_factory=dict)  # wheels, out dir
    reason: str = ""                   # why a skipped stage did not run; empty otherwise
    cpu_s: float = 0.0                 # CPU seconds of its commands (user + system)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"Result.status: expected one of {', '.join(STATUSES)}, got "
                             f"{self.status!r} (a skip's reason goes in Result.reason)")
        if (self.status == SKIP) != bool(self.reason):
            raise ValueError(f"Result.reason: expected a reason exactly when skipped, got "
                             f"status {self.status!r} with reason {self.reason!r}")

    @classmethod
    def skip(cls, reason: str, **fields: Any) -> Result:
        return cls(SKIP, reason=reason, origin="skip", **fields)

    @property
    def label(self) -> str:
        """What a person reads: pass, fail or `skipped: <reason>`."""
        return label(self.status, self.reason)

    def to_json(self) -> dict:
        data = dataclasses.asdict(self)
        data.pop("outputs")
        return {"status": data.pop("status"), "reason": data.pop("reason"), **data}


def label(status: str, reason: str = "") -> str:
    return f"skipped: {reason}" if status == SKIP else status
