"""Planted bug for the atheris path: an exception that is not the refusal the target expects."""
from __future__ import annotations


class Refused(ValueError):
    pass


def parse(data: bytes) -> int:
    if len(data) < 6:
        raise Refused("too short")
    if data[:4] == b"OPFG" and data[4] == 0x33:
        return {"a": 1}[data[5:6].decode("latin-1")]  # the bug: KeyError for anything but "a"
    return 0


def test_one_input(data: bytes) -> None:
    try:
        parse(data)
    except Refused:
        pass
