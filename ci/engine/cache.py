"""Results kept across runs: a stage's digest (a hash of everything it reads) and the store.

A stage with `cache: inputs` keeps a pass under build/<out>/cache/<stage>-<digest>.json; a later
run with the same digest takes it instead of running (`--fresh`: wheels only — the build and
wheel stages).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ci import model as mx
from ci.model import key_hash
from ci.provision import venvs
from ci.report.result import Result

REPO = mx.REPO
SKIP_DIRS = {"build", "dist", "__pycache__", ".pytest_cache", ".nox", ".git"}


def tree_hash(roots: list[Path]) -> str:
    digest = hashlib.sha256()
    for root in roots:
        if root.is_file():
            digest.update(root.name.encode() + b"\0" + root.read_bytes())
            continue
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(root)
            if any(part in SKIP_DIRS or part.endswith(".egg-info") for part in rel.parts):
                continue
            if path.is_file() and not path.name.endswith((".so", ".pyc")):
                digest.update(f"{root.name}/{rel}\0".encode())
                digest.update(path.read_bytes())
    return digest.hexdigest()


def script_inputs(script: Path, repo: Path = REPO) -> list[Path]:
    """What a script stage reads besides the kernels: its own folder (scripts import their
    siblings), the package it lives in, and opforge_align, which the alignment scripts drive."""
    inputs = [script.parent, repo / "packages" / "align"]
    parts = script.relative_to(repo).parts
    if parts[0] == "packages" and len(parts) > 1:
        inputs.append(repo / "packages" / parts[1])
    return inputs


def stage_fields(stage: mx.Stage) -> dict[str, Any]:
    """The stage's declaration as the digest reads it: without `slow` (it decides whether a stage
    runs, not what it does); cuda `required` reads as `always` (it builds the same)."""
    fields = dataclasses.asdict(stage)
    del fields["slow"]
    if fields["cuda"] == "required":
        fields["cuda"] = "always"
    return fields


def stage_tree(matrix: mx.Matrix, stage: mx.Stage, cell: mx.Cell) -> dict[str, Any]:
    """The files (and for builds the knobs) the stage reads."""
    kernels = REPO / "kernels"
    if stage.kind == "build":
        assert stage.package is not None  # a build stage builds a package
        parts = {"tree": tree_hash([REPO / "packages" / stage.package, kernels]),
                 "sources": matrix.data["sources"]}
        if stage.tools and cell.native_toolchain:
            parts["toolchain"] = "native"
        if mx.builds_cuda(matrix, stage, cell):
            parts["toolkit"] = matrix.data["toolkits"][cell.values["toolkit"]]
        return parts
    if stage.kind == "pytest":
        return {"tree": tree_hash([REPO / stage.tests_dir, kernels])}
    if stage.kind == "script":
        return {"tree": tree_hash([*script_inputs(REPO / stage.run[0]), kernels])}
    return {"tree": tree_hash([REPO / "ci" / "artifacts"])}


def digest(matrix: mx.Matrix, cell: mx.Cell, stage: mx.Stage, key: str,
           inputs: Mapping[str, Result], args: tuple[str, ...] = ()) -> str:
    """A hash of everything the stage reads: declaration, key, files, venv pins, input files,
    arguments given to the run."""
    parts: dict[str, Any] = {"stage": stage_fields(stage), "key": key,
                             **stage_tree(matrix, stage, cell)}
    if stage.venv:
        parts["venv"] = venvs.requirements(matrix, cell, stage.venv)
    if args:
        parts["args"] = list(args)
    if stage.tools:
        parts["tools"] = venvs.tools_requirements(matrix, stage.tools)
    parts["inputs"] = [tree_hash([Path(w)]) for b in stage.after
                       for w in inputs[b].outputs.get("wheels", [])]
    parts["inputs"] += [tree_hash([Path(out)]) for b in stage.after
                        for out in [inputs[b].outputs.get("out"), *inputs[b].outputs.get("outs", [])]
                        if out]
    return key_hash(json.dumps(parts, sort_keys=True, default=str))


@dataclasses.dataclass(frozen=True)
class Store:
    """build/<out>/cache: one JSON file per kept pass."""
    root: Path
    fresh: bool = False          # --fresh: only wheels (built, repaired) come from the store

    def keeps(self, stage: mx.Stage) -> bool:
        return stage.cache == "inputs" and (stage.kind in ("build", "wheel") or not self.fresh)

    def path(self, stage: mx.Stage, digest: str) -> Path:
        return self.root / f"{stage.name}-{digest}.json"

    def load(self, stage: mx.Stage, digest: str) -> Result | None:
        path = self.path(stage, digest)
        if not self.keeps(stage) or not path.is_file():
            return None
        kept = json.loads(path.read_text())
        outputs = kept.get("outputs", {})
        if not all(Path(w).is_file() for w in outputs.get("wheels", [])) or \
                (outputs.get("out") and not Path(outputs["out"]).is_dir()):
            return None
        result = Result(**{k: v for k, v in kept.items() if k in Result.__annotations__})
        result.origin = "cached"
        result.detail = (f"inputs unchanged (hash {digest}) since the run of {kept['kept_at']} "
                         f"({result.duration_s:.0f} s then); {result.detail}").rstrip("; ")
        result.duration_s = result.cpu_s = 0.0
        return result

    def keep(self, stage: mx.Stage, digest: str, result: Result) -> None:
        if not self.keeps(stage) or result.status != "pass":
            return
        path = self.path(stage, digest)
        path.parent.mkdir(parents=True, exist_ok=True)
        kept = dataclasses.asdict(result) | {"kept_at": time.strftime("%Y-%m-%d %H:%M:%S")}
        path.write_text(json.dumps(kept, indent=1))
