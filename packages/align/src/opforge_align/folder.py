"""`opforge-align run FOLDER`: every model of a folder. An export folder (manifest.json, written
by `opforge-align export`) runs each model on each of its cases (inputs from data/*.npz: in0,
in1, ... in the model's input order); any other folder runs its *.onnx with generated inputs.

One run that cannot be done (a runtime refusing a model) is a failed run, reported with its
line; the others go on. Writes the stage result ($OPFORGE_STAGE_RESULT) for the matrix."""
from __future__ import annotations

import dataclasses
import fnmatch
import json
import os
import re
from pathlib import Path

import numpy as np

from . import align, report
from .errors import AlignError
from .model import load


def run(folder: Path, options: align.Options, *, json_path=None, report_dir=None,
        match: str = "*") -> int:
    jobs = [job for job in _jobs(folder) if fnmatch.fnmatchcase(job[0], match)]
    if not jobs:
        raise AlignError(f"{folder}: no model matches {match!r} (.onnx files, or an export "
                         "folder's manifest.json)")
    align._usable_runtimes(options)  # an unavailable runtime stops everything: one line, exit 2
    entries, numbers = [], {}
    for label, path, feeds in jobs:
        entry = _one(label, path, dataclasses.replace(options, stored_inputs=feeds), report_dir)
        entries.append(entry)
        key = "align." + re.sub(r"[^A-Za-z0-9_.-]+", "_", label)
        numbers[f"{key}.pass"] = int(entry["ok"] is True)
        if "max_ulp" in entry:
            numbers[f"{key}.max_ulp"] = entry["max_ulp"]
    failed = [e for e in entries if not e["ok"]]
    numbers.update({"align.runs": len(entries), "align.failed": len(failed)})
    for e in failed:
        print(f"FAIL {e['label']}: {e.get('error') or e['first_divergence']}")
    print(f"{folder}: {len(entries)} run(s), {len(failed)} failed")
    if json_path:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps({"folder": str(folder), "ok": not failed, "runs": entries},
                                        indent=1))
    _stage_result(numbers, [str(p) for p in (json_path, report_dir) if p])
    return 1 if failed else 0


def _jobs(folder: Path):
    manifest = folder / "manifest.json"
    if not manifest.is_file():
        for path in sorted(folder.glob("*.onnx")):
            yield path.stem, path, None
        return
    for entry in json.loads(manifest.read_text())["entries"]:
        for form, rel in entry["models"].items():
            if not isinstance(rel, str):
                continue
            for case in entry["cases"]:
                with np.load(folder / case["data"]) as data:
                    arrays = [data[k] for k in sorted((k for k in data.files if k.startswith("in")),
                                                      key=lambda k: int(k[2:]))]
                yield f"{entry['id']}.{form}.{case['name']}", folder / rel, arrays


def _one(label: str, path: Path, options: align.Options, report_dir) -> dict:
    try:
        if options.stored_inputs is not None:  # positional arrays -> the model's input names
            names = [i.name for i in load(path).inputs]
            options = dataclasses.replace(options, stored_inputs=dict(zip(names, options.stored_inputs)))
        result = align.run(path, options)
    except AlignError as err:
        return {"label": label, "model": str(path), "ok": False, "error": str(err)}
    if report_dir:
        report.write_markdown(result, Path(report_dir) / label)
    data = report.as_dict(result)
    ulps = [t.get("max_ulp") for t in data["tensors"] if isinstance(t.get("max_ulp"), float)]
    return {"label": label, **data, **({"max_ulp": max(ulps)} if ulps else {})}


def _stage_result(numbers: dict, artifacts: list) -> None:
    path = os.environ.get("OPFORGE_STAGE_RESULT")
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps({"numbers": numbers, "artifacts": artifacts}, indent=1))
