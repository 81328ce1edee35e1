"""Fuzz target (atheris): matrix.yaml's bytes into both of its readers.

- ci.matrix.from_bytes: bytes -> validated Matrix (size, UTF-8, YAML, every rule of the file);
- ci.bootstrap.read_requirements: the standard-library `tools:` reader that runs before PyYAML.

MatrixError and BootstrapError are refusals. Anything else is a finding, and so is a disagreement:
a pin bootstrap accepts must be one the real reader accepts, and when both accept the file they
read the same `tools:`.

    python fuzz/targets/matrix_yaml/target.py fuzz/targets/matrix_yaml/corpus -max_total_time=60
"""
from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from ci import bootstrap  # noqa: E402  (after the path insert)
from ci import matrix as mx  # noqa: E402


def test_one_input(data: bytes) -> None:
    matrix = _real_reader(data)
    pins = _bootstrap_reader(data)
    if pins is None:
        return
    for name, version in pins.items():
        mx.parse_pin(f"{name}=={version}", f"tools.{name}")   # a MatrixError here is a finding
    if matrix is not None and pins != dict(matrix.tools):
        raise AssertionError(f"bootstrap read tools {pins}, ci.matrix read {dict(matrix.tools)}")


def _real_reader(data: bytes) -> mx.Matrix | None:
    try:
        matrix = mx.from_bytes(data)
    except mx.MatrixError:
        return None
    for profile in matrix.profiles:        # what `nox -s matrix -- --list` does next
        cells, _ = mx.expand(matrix, profile)
        for stage in matrix.stages:
            mx.stage_key(matrix, stage, cells[0])
    return matrix


def _bootstrap_reader(data: bytes) -> dict[str, str] | None:
    try:
        bootstrap.read_requirements(data)
    except bootstrap.BootstrapError:
        return None
    return bootstrap.tool_pins(data.decode())


if __name__ == "__main__":
    import atheris

    atheris.instrument_all()
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
