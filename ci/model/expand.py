"""A profile's cells: the product of its axis values (per release variant), each combination
kept or excluded by the rules (conditions as data), the settings the kept ones' rules set."""
from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping
from typing import Any

from packaging.version import Version

from ci.model.checks import resolve
from ci.model.errors import MatrixError, show
from ci.model.matrix import Cell, Excluded, Matrix
from ci.model.values import AXES, Condition, is_version


def holds(cond: Condition, matrix_axes: Mapping, values: Mapping[str, str]) -> bool:
    left = resolve(matrix_axes, values, cond.attr)
    if cond.op in ("set", "unset"):
        return (left is not None) == (cond.op == "set")
    right: Any = cond.operand
    if right.startswith("$"):
        right = resolve(matrix_axes, values, right[1:])
    if left is None or right is None:
        return False
    if cond.op == "in":
        return left in (right if isinstance(right, list) else [right])
    if cond.op in ("==", "!="):
        return (str(left) == str(right)) == (cond.op == "==")
    a, b = _comparable(left, cond), _comparable(right, cond)
    return {">=": a >= b, "<=": a <= b, ">": a > b, "<": a < b}[cond.op]


def _comparable(value: Any, cond: Condition) -> Version:
    # parse() checks every compared value; a Matrix built otherwise still never fails open.
    if not is_version(value):
        raise MatrixError(cond.text, f"cannot compare {show(value)}: not a version")
    return Version(value)



def expand(matrix: Matrix, profile: str) -> tuple[list[Cell], list[Excluded]]:
    """The profile's cells (rules applied) and the combinations the rules excluded."""
    if profile not in matrix.profiles:
        raise MatrixError("profiles", f"{profile}: unknown profile (known: "
                          f"{', '.join(matrix.profiles)})")
    cells: list = []
    excluded: list = []
    for chosen, cell in _variant_axes(matrix.profiles[profile]):
        _expand_into(matrix, chosen, cell, cells, excluded)
    return _left_out(matrix, profile, cells, excluded)


def _left_out(matrix: Matrix, profile: str, cells: list[Cell],
              excluded: list[Excluded]) -> tuple[list[Cell], list[Excluded]]:
    """The cells less those the profile's `exclude:` leaves out (listed as excluded, with why)."""
    kept = []
    for cell in cells:
        hit = next(((i, e) for i, e in enumerate(matrix.profiles[profile].exclude)
                    if all(cell.values[axis] == value for axis, value in e.values.items())), None)
        if hit is None:
            kept.append(cell)
            continue
        index, exclusion = hit
        condition = ", ".join(f"{axis} == {value}" for axis, value in exclusion.values.items())
        excluded.append(Excluded(cell.values, f"profiles.{profile}.exclude[{index}]",
                                 exclusion.why, condition))
    return kept, excluded


def _variant_axes(profile: Any) -> list[tuple[dict[str, tuple[str, ...]], Cell]]:
    """(axis values, a template cell) per variant built (one, without variants)."""
    if not profile.variants:
        return [(profile.values, Cell({}, {}, profile.cpu_builds, gpu=profile.gpu,
                                      native_toolchain=profile.toolchain == "native"))]
    out = []
    for name, variant in profile.variants.items():
        if variant.skip:
            continue
        values = {axis: tuple(getattr(variant, axis, None) or chosen)
                  for axis, chosen in profile.values.items()}
        out.append((values, Cell({}, {}, variant.cpu_builds, name, "" if variant.default else name,
                                 gpu=profile.gpu, native_toolchain=profile.toolchain == "native")))
    return out


def _expand_into(matrix: Matrix, chosen: Mapping[str, tuple[str, ...]], template: Cell,
                 cells: list[Cell], excluded: list[Excluded]) -> None:
    for combo in itertools.product(*(chosen[axis] for axis in AXES)):
        values = dict(zip(AXES, combo))
        settings = dict(matrix.settings)
        reason = None
        for rule in matrix.rules:
            if not all(holds(c, matrix.axes, values) for c in rule.when):
                continue
            failed = next((c for c in rule.require if not holds(c, matrix.axes, values)), None)
            if failed is not None:
                reason = Excluded(values, rule.id, rule.why, failed.text)
                break
            settings.update(rule.set)
        if reason:
            excluded.append(reason)
        else:
            cells.append(dataclasses.replace(template, values=values, settings=settings))


def check_profile(matrix: Matrix, profile: str) -> None:
    cells, excluded = expand(matrix, profile)
    where = f"profiles.{profile}"
    if not cells:
        rules = sorted({e.rule for e in excluded})
        raise MatrixError(where, f"admits no cell (every combination is excluded by "
                          f"{', '.join(rules)})")
    for axis, values in _declared_values(matrix.profiles[profile]).items():
        for value in values:
            if any(c.values[axis] == value for c in cells):
                continue
            blockers = [e for e in excluded if e.values[axis] == value]
            top = max({e.rule for e in blockers}, key=[e.rule for e in blockers].count)
            first = next(e for e in blockers if e.rule == top)
            raise MatrixError(f"{where}.{axis}", f"{value}: no cell admits it ({first.by}: "
                              f"{first.why})")


def _declared_values(profile: Any) -> dict[str, list[str]]:
    """The axis values some built variant (or the profile itself) uses: each must admit a cell."""
    out: dict[str, set[str]] = {}
    for chosen, _ in _variant_axes(profile):
        for axis, values in chosen.items():
            out.setdefault(axis, set()).update(values)
    return {axis: sorted(values) for axis, values in out.items()}


def parse_filters(items: list[str], matrix: Matrix) -> dict[str, set[str]]:
    """`torch=2.14.1 ort=1.17.3,1.20.1` -> {axis: {values}}; unknown axes/values are errors."""
    filters: dict[str, set[str]] = {}
    for item in items:
        axis, sep, values = item.partition("=")
        if not sep or axis not in AXES:
            raise MatrixError("--only", f"{item!r}: expected AXIS=VALUE[,VALUE] with AXIS one of "
                              f"{', '.join(AXES)}")
        for value in values.split(","):
            if value not in matrix.axes[axis]:
                raise MatrixError("--only", f"{item!r}: unknown {axis} value {value!r} (known: "
                                  f"{', '.join(matrix.axes[axis])})")
            filters.setdefault(axis, set()).add(value)
    return filters
