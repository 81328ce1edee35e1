"""The plan: which cells and stages a run selects, and per cell and stage run / reuse / skip.

Pure: reads the matrix and the host facts; runs nothing. skip_reason is the one decision that
a stage is skipped, and why: --skip-slow, what this host lacks (a GPU, the TensorRT runtime, the
cell's toolkit), a CPU-only release variant, or an `after` stage that is skipped.

A stage runs once per key (ci.model.stage_key); other cells with the same key reuse the result.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from ci import model as mx
from ci.model import cell_slug, key_text
from ci.provision.probe import Fact, Host

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


def plan(matrix: mx.Matrix, host: Host, cells: Iterable[mx.Cell], *,
         stages: Iterable[str] | None = None, skip_slow: bool = False) -> list[dict[str, Planned]]:
    """What each selected stage of each cell will do, before anything runs."""
    names = list(matrix.stages if stages is None else stages)
    first: dict[str, int] = {}
    out = []
    for index, cell in enumerate(cells):
        row: dict[str, Planned] = {}
        for name in names:
            stage = matrix.stages[name]
            key = key_text(mx.stage_key(matrix, stage, cell))
            reason = skip_reason(matrix, host, stage, cell, row, skip_slow=skip_slow)
            if reason is not None:
                row[name] = Planned("skip", reason, key)
            elif key in first:
                row[name] = Planned("reuse", f"cell {first[key] + 1}", key)
            else:
                first[key] = index
                row[name] = Planned("run", "", key)
        out.append(row)
    return out


def plan_gathering(matrix: mx.Matrix, host: Host, cells: Iterable[mx.Cell], *,
                   stages: Iterable[str]) -> list[dict[str, Planned]]:
    """The plan when other runs made the cells' results (CI jobs, `--gather-from`): the gathering
    stages run unless this host cannot run them; the other stages' results are read, not run
    (their keys only)."""
    out = []
    for cell in cells:
        row = {}
        for name in stages:
            stage = matrix.stages[name]
            key = key_text(mx.stage_key(matrix, stage, cell))
            reason = skip_reason(matrix, host, stage, cell) if stage.gather else None
            row[name] = Planned("skip", reason, key) if reason else Planned("run", "", key)
        out.append(row)
    return out


def skip_reason(matrix: mx.Matrix, host: Host, stage: mx.Stage, cell: mx.Cell,
                row: Mapping[str, Planned] | None = None, *, skip_slow: bool = False) -> str | None:
    """None when the stage runs here; else the reason it is skipped. Without the cell's `row` so
    far (gathering: the other stages ran elsewhere) its `after` stages are not asked."""
    if skip_slow and stage.slow:
        return SLOW_REASON
    reason = host_reason(matrix, host, stage, cell) or cpu_variant_reason(stage, cell)
    if reason is not None or row is None:
        return reason
    return blocked_by(stage, {b: row[b].action == "skip" for b in stage.after},
                      {b: row[b].reason for b in stage.after})


def host_reason(matrix: mx.Matrix, host: Host, stage: mx.Stage, cell: mx.Cell) -> str | None:
    """What this host lacks for the stage: a GPU, the TensorRT runtime, the toolkit it builds with."""
    if "gpu" in stage.needs and not host.gpu.ok:
        return "no GPU"
    if "tensorrt-runtime" in stage.needs and not host.tensorrt.ok:
        return "no TensorRT runtime (libnvinfer not installed)"
    tid = cell.values["toolkit"]
    if stage.kind == "build" and mx.builds_cuda(matrix, stage, cell) and \
            not host.toolkits.get(tid, Fact(False, "unknown")).ok:
        return f"toolkit {tid} unavailable here ({host.toolkits[tid].detail})"
    return None


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
                text = f"run once its group is done, over every {gather} of the group"
            lines.append(f"    {name:{width}} {text}")
    for out in excluded:
        lines.append(f"excluded: {out.id}: {out.by} ({out.condition}): {out.why}")
    lines.append(f"{len(cells)} cells, {len(selection.stages)} stages ({' '.join(selection.stages)}), "
                 f"{runs} stage runs, {len(excluded)} combinations excluded")
    return "\n".join(lines)
