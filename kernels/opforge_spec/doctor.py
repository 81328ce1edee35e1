"""The doctors' report, one copy for every package's doctor (`python -m opforge_ort doctor`,
`python -m opforge_trt doctor`): what was checked and passed, each problem with its stable code,
what is wrong, the fix and the evidence, and the lines a doctor prints.

It lives in opforge-spec because that is the one distribution the plugins share: each builds
against it and declares it (they are installed independently and depend on no other opforge
package). The copies it replaces had drifted (one kept a problem reported twice, one had a field
of its own). Standard library only."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Problem:  # a doctor may add the evidence a later check finds
    code: str           # stable: tests, scripts and the README name problems by it
    message: str        # what is wrong, naming the file, symbol or op
    fix: str            # what to do about it
    evidence: str = ""  # the output that shows it (a loader error, nm, ldd)


@dataclass
class Report:
    checked: list[tuple[str, str]] = field(default_factory=list)  # (topic, text) that passed
    problems: list[Problem] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)  # what a doctor read besides (TensorRT: creators)

    def ok(self, topic: str, text: str) -> None:
        self.checked.append((topic, text))

    def problem(self, code: str, message: str, fix: str, evidence: str = "") -> None:
        """Record a problem once (two checks that find the same problem report it once)."""
        if not any(p.code == code and p.message == message for p in self.problems):
            self.problems.append(Problem(code, message, fix, evidence))

    def codes(self) -> list[str]:
        return [p.code for p in self.problems]

    def lines(self, title: str, healthy: str, notes: tuple[str, ...] = ()) -> list[str]:
        """What a doctor prints: the title, each check passed, each problem with its evidence and
        fix, any notes, then the result (`healthy` when nothing is wrong, else the codes)."""
        out = [title, *(f"  ok       {topic:9s} {text}" for topic, text in self.checked)]
        for p in self.problems:
            out.append(f"  PROBLEM  [{p.code}] {p.message}")
            out += [f"           evidence: {p.evidence}"] if p.evidence else []
            out.append(f"           fix: {p.fix}")
        out += [f"  {note}" for note in notes]
        result = healthy if not self.problems else f"{len(self.problems)} problem(s): " + ", ".join(self.codes())
        return [*out, "result: " + result]

    def exit_code(self) -> int:
        return 1 if self.problems else 0
