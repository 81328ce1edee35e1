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

from . import align, npz, report
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
    for label, path, case in jobs:
        entry = _one(label, path, case, options, report_dir)
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


def _jobs(folder: Path) -> list:
    """(label, model path, case data path or None) of every run of the folder."""
    manifest = folder / "manifest.json"
    if not manifest.is_file():
        return [(path.stem, path, None) for path in sorted(folder.glob("*.onnx"))]
    jobs = []
    for i, entry in enumerate(_entries(manifest)):
        where = f"{manifest}: entries[{i}]"
        cases = [(case["name"], _inside(folder, case["data"], f"{where}.cases[{k}].data"))
                 for k, case in enumerate(entry["cases"])]
        for form, rel in entry["models"].items():
            if isinstance(rel, dict):  # {"skipped": why} or {"error": what}: not exported
                continue
            if not isinstance(rel, str):
                raise AlignError(f"{where}.models.{form}: expected a model path or an object "
                                 f"saying why it was not exported, got {_kind(rel)}")
            path = _inside(folder, rel, f"{where}.models.{form}")
            jobs += [(f"{entry['id']}.{form}.{name}", path, data) for name, data in cases]
    return jobs


def _entries(manifest: Path) -> list:
    """The manifest's entries, each checked for the fields a run reads."""
    try:
        content = json.loads(manifest.read_text())
    except (ValueError, UnicodeDecodeError) as err:
        raise AlignError(f"{manifest}: not valid JSON ({err})") from None
    entries = content.get("entries") if isinstance(content, dict) else None
    if not isinstance(entries, list):
        raise AlignError(f"{manifest}: expected an object with an 'entries' list, got "
                         f"{_kind(entries if isinstance(content, dict) else content)}")
    for i, entry in enumerate(entries):
        _check_entry(entry, f"{manifest}: entries[{i}]")
    return entries


def _check_entry(entry, where: str) -> None:
    if not isinstance(entry, dict):
        raise AlignError(f"{where}: expected an object, got {_kind(entry)}")
    expected = {"id": (str, "a string"), "models": (dict, "an object mapping form to model path"),
                "cases": (list, "a list of {name, data}")}
    for key, (kind, text) in expected.items():
        if not isinstance(entry.get(key), kind):
            raise AlignError(f"{where}: '{key}': expected {text}, got {_kind(entry.get(key))}")
    for k, case in enumerate(entry["cases"]):
        if not (isinstance(case, dict) and isinstance(case.get("name"), str)
                and isinstance(case.get("data"), str)):
            raise AlignError(f"{where}.cases[{k}]: expected {{\"name\": str, \"data\": str}}, "
                             f"got {_kind(case)}")


def _kind(value) -> str:
    return "none" if value is None else f"{type(value).__name__} {json.dumps(value)[:60]}"


def _inside(folder: Path, rel: str, where: str) -> Path:
    """`rel` as a path inside `folder` (links resolved), or AlignError: a manifest names files of
    its own folder only, as onnx requires of external data."""
    root = folder.resolve()
    if not rel or Path(rel).is_absolute() or "\0" in rel:
        raise AlignError(f"{where}: expected a path relative to {folder}, got {rel!r}")
    target = (root / rel).resolve()
    if target != root and root not in target.parents:
        raise AlignError(f"{where}: {rel!r} points outside the folder {folder}; expected a path "
                         "inside it")
    return folder / rel


def _one(label: str, path: Path, case: Path | None, options: align.Options, report_dir) -> dict:
    try:
        if case is not None:
            names = [i.name for i in load(path).inputs]
            options = dataclasses.replace(options, stored_inputs=_case_inputs(case, names, options),
                                          stored_from=str(case))
        result = align.run(path, options)
    except AlignError as err:
        return {"label": label, "model": str(path), "ok": False, "error": str(err)}
    if report_dir:
        report.write_markdown(result, Path(report_dir) / label)
    data = report.as_dict(result)
    ulps = [t.get("max_ulp") for t in data["tensors"] if isinstance(t.get("max_ulp"), float)]
    return {"label": label, **data, **({"max_ulp": max(ulps)} if ulps else {})}


def _case_inputs(data: Path, names: list, options: align.Options) -> dict:
    """A case's arrays in0, in1, ... under the model's input names, in order."""
    members = npz.members(data)
    positional = {int(m.group(1)): key for key in members
                  if (m := re.fullmatch(r"in([0-9]+)", key))}
    keys = [positional[i] for i in sorted(positional)]
    if sorted(positional) != list(range(len(names))):
        expected = [f"in{i}" for i in range(len(names))]
        raise AlignError(f"{data}: expected the arrays {expected} (one per input of the model, in "
                         f"order), got {keys}")
    for key in keys:
        npz.check_size(data, members[key], options.max_input_bytes)
    arrays = npz.load(data, keys)
    return {name: arrays[key] for name, key in zip(names, keys)}


def _stage_result(numbers: dict, artifacts: list) -> None:
    path = os.environ.get("OPFORGE_STAGE_RESULT")
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps({"numbers": numbers, "artifacts": artifacts}, indent=1))
