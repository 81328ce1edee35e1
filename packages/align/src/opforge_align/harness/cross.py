"""Cross-version: the outputs of the same ONNX files in several ONNX Runtime releases (each folder
written by ort_check), compared with the oldest release's.

Custom-domain form: the same opforge_ort library computes them, so they must be bitwise equal.
Decomposed form: ONNX Runtime's own kernels may change between releases, so each must stay within
the spec tolerance of the other (NEIGHBOUR_SCALE x)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from .. import outputs as stored
from . import known
from .checks import Results, against_neighbour, failed, same_bits, spec


def load_run(folder: Path) -> dict:
    data = json.loads((folder / "ort_results.json").read_text())
    return {"folder": folder, "version": data["context"]["onnxruntime"], "context": data["context"]}


def compare(folders: list) -> Results:
    runs = sorted((load_run(Path(f)) for f in folders),
                  key=lambda r: known.version_key(r["version"]))
    results = Results(context={"onnxruntime versions": ", ".join(r["version"] for r in runs)})
    if len(runs) < 2:
        results.add(failed(f"cross-version needs >= 2 ONNX Runtime results, got {len(runs)}",
                           layer="cross", op="*", dtype="*", subject="ort", against="ort"))
        return results
    base = runs[0]
    for other in runs[1:]:
        _compare_pair(results, base, other)
    # subject "ort-<version>.<form>", against "ort-<version>"
    known.mark(results, form_of=lambda c: c.subject.rsplit(".", 1)[-1],
               versions_of=lambda c: [c.subject[4:].rsplit(".", 1)[0], c.against[4:]])
    return results


def _compare_pair(results: Results, base: dict, other: dict) -> None:
    shas_a, shas_b = base["context"]["model_sha256"], other["context"]["model_sha256"]
    for npz in sorted((base["folder"] / "outputs").glob("*.npz")):
        entry, form = npz.stem.rsplit(".", 1)
        op_name, dtype = entry.split(".")[:2]
        op = spec.OPS[op_name]
        where: dict[str, Any] = {"layer": "cross", "subject": f"ort-{other['version']}.{form}"}
        against = f"ort-{base['version']}"
        model = f"models/{entry}.{form}.onnx"
        if shas_a.get(model) != shas_b.get(model):
            results.add(failed(f"{model}: the two runs used different files (sha256 differs): "
                               "export once, run that folder in every ORT venv", op=op_name,
                               dtype=dtype, against=against, **where))
            continue
        counterpart = other["folder"] / "outputs" / npz.name
        if not counterpart.exists():
            results.add(failed(f"no output of {model} in {other['folder']}", op=op_name,
                               dtype=dtype, against=against, **where))
            continue
        a, b = np.load(npz), np.load(counterpart)
        for case in stored.bases(op, a.files):
            if not set(stored.keys(op, case)) <= set(b.files):
                results.add(failed(f"case {case} did not run", case=case, op=op_name, dtype=dtype,
                                   against=against, **where))
                continue
            inputs = _inputs(base, op_name, dtype, case)
            compare_fn = same_bits if form.startswith("custom") else against_neighbour
            results.add(compare_fn(op, stored.unpack(op, b, case), stored.unpack(op, a, case),
                                   inputs, dtype, against=against, case=case, **where))


def _inputs(run: dict, op_name: str, dtype: str, case: str) -> tuple:
    """The case's inputs, if the export folder is still there (for the worst-element message)."""
    path = Path(run["context"]["models"]) / "data" / f"{op_name}.{dtype}.{case}.npz"
    if not path.exists():
        return ()
    data = np.load(path)
    return tuple(data[k] for k in sorted(data.files) if k.startswith("in"))
