"""A stage's key in a cell: what its result depends on (its axes, the settings its command reads,
its inputs' keys); a stage runs once per key and every other cell reuses that result. Also the
key's text and hash, and a cell's CI job id."""
from __future__ import annotations

import hashlib

from ci.model.matrix import Cell, Matrix
from ci.model.schema import Stage


def stage_key(matrix: Matrix, stage: str | Stage, cell: Cell) -> tuple[tuple[str, str], ...]:
    """What the stage's result depends on in this cell: its axes, its settings, its inputs' keys."""
    stage = matrix.stages[stage] if isinstance(stage, str) else stage
    return tuple(sorted(_key_pairs(matrix, stage, cell, {})))


def _key_pairs(matrix: Matrix, stage: Stage, cell: Cell, done: dict[str, set]) -> set:
    # `done` keeps each earlier stage's pairs: a stage after many stages that are themselves after
    # many would otherwise be walked once per path (exponential in the number of stages).
    if stage.name in done:
        return done[stage.name]
    pairs: set[tuple[str, str]] = {("stage", stage.name)}
    axes = list(stage.depends)
    if stage.kind == "build" and not builds_cuda(matrix, stage, cell):
        axes = [a for a in axes if a not in ("toolkit", "arch_list")]
    pairs.update((axis, cell.values[axis]) for axis in axes)
    if stage.kind == "build" and cell.label and builds_cuda(matrix, stage, cell):
        pairs.add(("label", cell.label))   # the label is in the wheel's name and metadata
    pairs.update((f"setting.{s}", str(cell.settings[s])) for s in stage.placeholders()
                 if s in matrix.settings)
    for before in stage.after if stage.key == "full" else ():
        earlier = _key_pairs(matrix, matrix.stages[before], cell, done)
        pairs.update(p for p in earlier if p[0] != "stage")
        pairs.add((f"after.{before}", ""))
    done[stage.name] = pairs
    return pairs


def builds_cuda(matrix: Matrix, stage: Stage, cell: Cell) -> bool:
    if stage.cuda == "required":    # cannot build without CUDA: a CPU-builds profile too
        return True
    if cell.cpu_builds:
        return False
    if stage.cuda == "always":
        return True
    if stage.cuda == "torch":
        return matrix.props("torch", cell.values["torch"]).get("cuda") is not None
    return False



def key_text(key: tuple) -> str:
    return " ".join(f"{k}={v}" if v else k for k, v in key)


def key_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def cell_slug(cell: Cell) -> str:
    """A CI job id: 'cuda-13.0-pypi_torch2.14.1_sm80-90_opset17_ort1.17.3_trt10.14'."""
    values = cell.values
    archs = "-".join(arch.replace(".", "") for arch in values["arch_list"].split(";"))
    slug = (f"{values['toolkit']}_torch{values['torch']}_sm{archs}_opset{values['opset']}"
            f"_ort{values['ort']}_trt{values['tensorrt']}")
    return f"{slug}_{cell.variant}" if cell.variant else slug
