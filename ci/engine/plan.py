"""The plan: which cells and stages a run selects, and per cell and stage run / reuse / skip.

Pure: reads the matrix, the host facts and which files exist; runs nothing.

A stage runs once per key (ci.matrix.stage_key); other cells with the same key reuse the result.
A stage whose `after` stage is skipped is skipped with that reason.
"""
from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Mapping
from pathlib import Path

from ci import matrix as mx
from ci import probe as hostprobe

SLOW_REASON = "slow stage (--skip-slow)"


@dataclasses.dataclass(frozen=True)
class Planned:
    action: str        # run | reuse | skip
    reason: str = ""   # skip reason, or the cell reused
    key: str = ""


@dataclasses.dataclass(frozen=True)
class Selection:
    """What a run covers: the profile's cells kept by the filters, the stages chosen."""
    profile: str
    cells: tuple[mx.Cell, ...]
    excluded: tuple[mx.Excluded, ...]
    stages: tuple[str, ...]          # in the matrix's run order
    skip_slow: bool = False


@dataclasses.dataclass(frozen=True)
class Only:
    """`--only` parsed: axis values, stage names, package names."""
    axes: Mapping[str, set[str]]
    stages: frozenset[str] = frozenset()
    packages: frozenset[str] = frozenset()
    variants: frozenset[str] = frozenset()


def key_text(key: tuple) -> str:
    return " ".join(f"{k}={v}" if v else k for k, v in key)


def key_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def cell_slug(cell: mx.Cell) -> str:
    """A CI job id: 'cuda-13.0-pypi_torch2.14.1_sm80-90_opset17_ort1.17.3_trt10.14'."""
    values = cell.values
    archs = "-".join(arch.replace(".", "") for arch in values["arch_list"].split(";"))
    slug = (f"{values['toolkit']}_torch{values['torch']}_sm{archs}_opset{values['opset']}"
            f"_ort{values['ort']}_trt{values['tensorrt']}")
    return f"{slug}_{cell.variant}" if cell.variant else slug


# ------------------------------------------------------------------------------------- selection


def parse_only(items: Iterable[str], matrix: mx.Matrix) -> Only:
    """`torch=2.14.1 stage=unit-ort,align package=loader` -> Only; unknown names are errors."""
    stages: set[str] = set()
    packages: set[str] = set()
    variants: set[str] = set()
    axis_items = []
    known_packages = sorted({s.package for s in matrix.stages.values() if s.package})
    known_variants = sorted({v for p in matrix.profiles.values() for v in (p.variants or {})})
    for item in items:
        field, _, values = item.partition("=")
        if field == "stage":
            stages |= _known(item, values, list(matrix.stages), "stage")
        elif field == "package":
            packages |= _known(item, values, known_packages, "package")
        elif field == "variant":
            variants |= _known(item, values, known_variants, "variant")
        else:
            axis_items.append(item)
    try:
        axes = mx.parse_filters(axis_items, matrix)
    except mx.MatrixError as exc:
        raise mx.MatrixError("--only", exc.problem.replace(
            "with AXIS one of", "with AXIS stage, package, variant or one of")) from None
    return Only(axes, frozenset(stages), frozenset(packages), frozenset(variants))


def _known(item: str, values: str, known: list[str], what: str) -> set[str]:
    names = set(values.split(","))
    unknown = sorted(names - set(known))
    if unknown:
        raise mx.MatrixError("--only", f"{item!r}: unknown {what} {unknown[0]!r} (known: "
                             f"{', '.join(known)})")
    return names


def select_stages(matrix: mx.Matrix, profile: str, only: Only) -> tuple[str, ...]:
    """The profile's stages, narrowed to --only stage=/package= and the stages they run after."""
    chosen = set(matrix.profiles[profile].stages or matrix.stages)
    wanted = set(only.stages) | {s.name for s in matrix.stages.values()
                                 if s.package and s.package in only.packages}
    if wanted:
        outside = sorted(wanted - chosen)
        if outside and only.stages & set(outside):
            raise mx.MatrixError("--only", f"stage {outside[0]} is not run by profile {profile} "
                                 f"(its stages: {', '.join(s for s in matrix.stages if s in chosen)})")
        chosen = _with_after(matrix, wanted & chosen)
    return tuple(name for name in matrix.stages if name in chosen)


def _with_after(matrix: mx.Matrix, names: set[str]) -> set[str]:
    todo, done = list(names), set()
    while todo:
        name = todo.pop()
        if name not in done:
            done.add(name)
            todo.extend(matrix.stages[name].after)
    return done


def select(matrix: mx.Matrix, profile: str, *, only: Iterable[str] = (), cell_id: str | None = None,
           skip_slow: bool = False) -> Selection:
    """The cells and stages of a run; MatrixError (naming the valid choices) when none match."""
    parsed = parse_only(only, matrix)
    cells, excluded = mx.expand(matrix, profile)
    if cell_id is not None:
        slugs = [cell_slug(c) for c in cells]
        if cell_id not in slugs:
            raise mx.MatrixError("--cell", f"{cell_id!r}: no cell of profile {profile} has this id "
                                 f"(known: {', '.join(slugs)})")
        cells = [cells[slugs.index(cell_id)]]
    cells = [c for c in cells if c.matches(parsed.axes)
             and (not parsed.variants or c.variant in parsed.variants)]
    excluded = [e for e in excluded if all(e.values[a] in v for a, v in parsed.axes.items())]
    if not cells:
        raise mx.MatrixError("--only", f"no cell of profile {profile} matches "
                             f"{' '.join(only) or '--cell ' + str(cell_id)}")
    stages = select_stages(matrix, profile, parsed)
    if not stages:
        raise mx.MatrixError("--only", f"no stage of profile {profile} matches {' '.join(only)}")
    return Selection(profile, tuple(cells), tuple(excluded), stages, skip_slow)


# ------------------------------------------------------------------------------------------ plan


def plan(matrix: mx.Matrix, host: hostprobe.Host, cells: Iterable[mx.Cell], repo: Path = mx.REPO,
         *, stages: Iterable[str] | None = None, skip_slow: bool = False) -> list[dict[str, Planned]]:
    """What each selected stage of each cell will do, before anything runs."""
    names = list(matrix.stages if stages is None else stages)
    first: dict[str, int] = {}
    out = []
    for index, cell in enumerate(cells):
        row: dict[str, Planned] = {}
        for name in names:
            stage = matrix.stages[name]
            key = key_text(mx.stage_key(matrix, stage, cell))
            reason = skip_reason(matrix, host, stage, cell, repo, row, skip_slow)
            if reason is not None:
                row[name] = Planned("skip", reason, key)
            elif key in first:
                row[name] = Planned("reuse", f"cell {first[key] + 1}", key)
            else:
                first[key] = index
                row[name] = Planned("run", "", key)
        out.append(row)
    return out


def plan_gathering(matrix: mx.Matrix, host: hostprobe.Host, cells: Iterable[mx.Cell],
                   repo: Path = mx.REPO, *, stages: Iterable[str]) -> list[dict[str, Planned]]:
    """The plan when other runs made the cells' results (CI jobs, `--gather-from`): the gathering
    stages run unless this host cannot run them; the other stages' results are read, not run
    (their keys only)."""
    out = []
    for cell in cells:
        row = {}
        for name in stages:
            stage = matrix.stages[name]
            key = key_text(mx.stage_key(matrix, stage, cell))
            reason = hostprobe.decide(matrix, host, stage, cell, repo) if stage.gather else None
            row[name] = Planned("skip", reason, key) if reason else Planned("run", "", key)
        out.append(row)
    return out


def skip_reason(matrix: mx.Matrix, host: hostprobe.Host, stage: mx.Stage, cell: mx.Cell,
                repo: Path, row: Mapping[str, Planned], skip_slow: bool) -> str | None:
    if skip_slow and stage.slow:
        return SLOW_REASON
    reason = hostprobe.decide(matrix, host, stage, cell, repo) or cpu_variant_reason(stage, cell)
    if reason is None and stage.tests and not (repo / stage.tests).is_dir():
        reason = f"{stage.tests} not present yet"
    if reason is not None:
        return reason
    return blocked_by(stage, {b: row[b].action == "skip" for b in stage.after},
                      {b: row[b].reason for b in stage.after})


def cpu_variant_reason(stage: mx.Stage, cell: mx.Cell) -> str | None:
    """A CPU-only release variant ships no package that cannot be built without CUDA."""
    if cell.variant and cell.cpu_builds and stage.kind == "build" and stage.cuda == "required":
        return f"variant {cell.variant} ships CPU builds only; {stage.package} needs CUDA"
    return None


def blocked_by(stage: mx.Stage, missing: Mapping[str, bool], why: Mapping[str, str]) -> str | None:
    """Why the stage cannot run for want of its inputs; a wheel stage checks whatever was built."""
    absent = [b for b in stage.after if missing[b]]
    if stage.kind == "wheel":
        return None if len(absent) < len(stage.after) else "no wheel was built"
    return f"needs {absent[0]} ({why[absent[0]]})" if absent else None


def render_plan(matrix: mx.Matrix, selection: Selection, planned: list[dict[str, Planned]]) -> str:
    lines = []
    cells, excluded = selection.cells, selection.excluded
    runs = sum(p.action == "run" for row in planned for p in row.values())
    width = max(map(len, selection.stages)) + 1
    for index, (cell, row) in enumerate(zip(cells, planned), 1):
        lines.append(f"cell {index}/{len(cells)}: {cell.id}  [--cell {cell_slug(cell)}]")
        for name, item in row.items():
            text = {"run": "run", "reuse": f"reuse {item.reason}",
                    "skip": f"skipped: {item.reason}"}[item.action]
            gather = matrix.stages[name].gather
            if gather and item.action == "run":
                text = f"run after all cells, over every {gather} of the group"
            lines.append(f"    {name:{width}} {text}")
    for item in excluded:
        lines.append(f"excluded: {item.id}: rule {item.rule} ({item.condition}): {item.why}")
    lines.append(f"{len(cells)} cells, {len(selection.stages)} stages ({' '.join(selection.stages)}), "
                 f"{runs} stage runs, {len(excluded)} combinations excluded")
    return "\n".join(lines)
