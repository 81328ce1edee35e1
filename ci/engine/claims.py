"""Who may use a venv at once when stages run side by side (`--jobs`).

A stage states what it needs installed on top of the venv's base: {distribution: wheel}. Stages
whose needs agree on every distribution they share use the venv together; a stage that needs
another wheel of a distribution somebody is using waits until that stage ends, so no test runs
while pip swaps a wheel under it. A stage that needs nothing on top (a build against the venv's
torch) shares the venv with anyone. Preparing a venv (creating it, pip-installing on top) is one
stage at a time, so the second of two sharing stages finds everything installed.
"""
from __future__ import annotations

import collections
import contextlib
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path


class VenvClaims:
    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._holders: dict[Path, list[Mapping[str, str]]] = collections.defaultdict(list)
        self._preparing: dict[Path, threading.RLock] = collections.defaultdict(threading.RLock)

    @contextlib.contextmanager
    def claim(self, venv: Path, needs: Mapping[str, str]) -> Iterator[None]:
        """Use `venv` with `needs` installed on top for the duration of the block."""
        with self._changed:
            self._changed.wait_for(lambda: self.agrees(venv, needs))
            self._holders[venv].append(needs)
        try:
            yield
        finally:
            with self._changed:
                self._holders[venv].remove(needs)
                self._changed.notify_all()

    def agrees(self, venv: Path, needs: Mapping[str, str]) -> bool:
        return all(held.get(name, wheel) == wheel
                   for held in self._holders[venv] for name, wheel in needs.items())

    def preparing(self, venv: Path) -> threading.RLock:
        """Held while the venv is created or installed into."""
        with self._changed:
            return self._preparing[venv]
