"""Layer 2, runtime side: run an export folder's models in ONNX Runtime (opforge_ort registered)
and in onnx's reference evaluator; compare with the float64 reference and the torch outputs.

Needs onnxruntime and numpy (onnx for the reference evaluator; without it that opinion is
recorded as skipped). Writes outputs/<entry>.<form>.npz (one array per case) for the
cross-version comparison, and ort_results.json.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import numpy as np

from .. import outputs as stored
from . import known
from .checks import (
    Results,
    against_neighbour,
    against_reference,
    failed,
    inject_fault,
    same_bits,
    skipped,
    spec,
)

# The custom-domain form runs the same kernels/ code as opforge_torch, on the same machine: the
# outputs must agree to the last bit. (Compiler flags that change FMA contraction between the
# two packages would show up here as a few ulp.)
SAME_KERNEL_ULP = 0


def library_path(explicit: str | None = None) -> str | None:
    if explicit:
        return explicit
    try:
        import opforge_ort
    except ImportError:
        return None
    return opforge_ort.library_path()


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def check_folder(models: Path, out: Path, *, library: str | None, fault: str | None = None,
                 refeval: bool = True, ir_version: int | None = None) -> Results:
    import onnxruntime as ort

    manifest = json.loads((models / "manifest.json").read_text())
    results = Results(context={"onnxruntime": ort.__version__, "numpy": np.__version__,
                               "opforge_ort library": library or "not found",
                               "models": str(models.resolve()), "opset": manifest["opset"],
                               "ir_version": manifest["ir_version"],
                               "ir_version restamped to": ir_version or "no",
                               "exported by torch": manifest["torch"]})
    onnx_ok = refeval and _has_onnx()
    if onnx_ok:
        import onnx

        results.context["onnx"] = onnx.__version__
    for item in manifest["not_exported"]:
        results.add(skipped(item["reason"], layer="2", op=item["op"], dtype=item["dtype"],
                            subject="ort.*", against="reference"))
    shas = {}
    (out / "outputs").mkdir(parents=True, exist_ok=True)
    for entry in manifest["entries"]:
        cases = [(c["name"], np.load(models / c["data"])) for c in entry["cases"]]
        for form, model in entry["models"].items():
            job = Job(spec.OPS[entry["op"]], entry, form, cases)
            if isinstance(model, dict):
                _record_not_exported(results, model, job)
                continue
            shas[model] = sha256(models / model)  # of the exported file, even if restamped
            path = restamped(models / model, out, ir_version) if ir_version else models / model
            if form.startswith("custom") and not library:
                results.add(skipped("opforge_ort is not installed", against="reference",
                                    **job.where(f"ort.{form}")))
            elif _unserved(job.op, entry["attrs"]):
                results.add(skipped(_unserved(job.op, entry["attrs"]), against="reference",
                                    **job.where(f"ort.{form}")))
            else:
                outputs = _run_ort(results, job, path, library=library, fault=fault)
                # one array per case, or per case and output (outputs.keys: "random@H")
                np.savez(out / "outputs" / f"{entry['id']}.{form}.npz", **outputs)
            if onnx_ok:
                _run_refeval(results, job, path)
            elif refeval:
                results.add(skipped("onnx is not installed", against="reference",
                                    **job.where(f"refeval.{form}")))
    results.context["model_sha256"] = shas
    known.mark(results, form_of=lambda c: c.subject.split(".", 1)[1],
               versions_of=lambda c: [ort.__version__] if c.subject.startswith("ort.") else [])
    return results


@dataclass
class Job:
    """One exported model and the cases it serves."""
    op: spec.OpSpec
    entry: dict
    form: str
    cases: list   # [(case name, npz data)]

    @property
    def dtype(self) -> str:
        return self.entry["dtype"]

    def where(self, subject: str, case: str = "*") -> dict:
        return {"layer": "2", "op": self.op.name, "dtype": self.dtype, "subject": subject,
                "case": case}


def restamped(path: Path, out: Path, ir_version: int) -> Path:
    """A copy saved with at most `ir_version` (ORT < 1.18 reads IR <= 8; the graphs need nothing
    newer). Prefer exporting with export.py --ir-version: then every ORT runs the very same file."""
    import onnx

    model = onnx.load(str(path))
    if model.ir_version <= ir_version:
        return path
    model.ir_version = ir_version
    for node in model.graph.node:
        del node.metadata_props[:]
    copy = out / f"models-ir{ir_version}" / path.name
    copy.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(copy))
    return copy


def _has_onnx() -> bool:
    try:
        import onnx.reference  # noqa: F401
    except ImportError:
        return False
    return True


def _record_not_exported(results, model: dict, job: Job) -> None:
    if "skipped" in model:
        results.add(skipped(model["skipped"], against="reference", **job.where(f"ort.{job.form}")))
    else:  # the exporter failed: a failure of layer 2, reported with the exporter's message
        results.add(failed(model.get("error", "export failed"), against="torch", rule="exports",
                           **job.where(f"export.{job.form}")))


def _inputs(data) -> list:
    return [data[f"in{i}"] for i in range(len([k for k in data.files if k.startswith("in")]))]


def session(path: Path, library: str | None):
    import onnxruntime as ort

    options = ort.SessionOptions()
    if library:
        options.register_custom_ops_library(library)
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _unserved(op, attrs: dict) -> str:
    """Why ONNX Runtime cannot run a node with these attributes, or "": an output whose dtype an
    attribute picks other than its default (RMSNormQuant's float8 Q; ORT's custom-op API fixes an
    output's type when the op is registered: packages/ort_plugin/README.md)."""
    for name in op.outputs:
        if op.quantized_output(name) and op.output_dtype(name, "", attrs) != op.output_dtype(name, "", {}):
            return (f"ONNX Runtime: {op.name}'s {name} is registered as {op.output_dtype(name, '', {})} (its "
                    f"custom-op API fixes an output's type at registration), not {op.output_dtype(name, '', attrs)}")
    return ""


def _run_ort(results, job: Job, path: Path, *, library, fault) -> dict:
    subject = f"ort.{job.form}"
    try:
        sess = session(path, library if job.form.startswith("custom") else None)
    except Exception as err:  # noqa: BLE001  ORT's errors are the result here, not a crash
        _fail_all(results, job, job.cases, subject, f"session creation failed: {err}")
        return {}
    names = [i.name for i in sess.get_inputs()]
    outputs = {}
    for name, data in job.cases:
        inputs = _inputs(data)
        try:
            y = op_outputs(job.op, sess.run(None, dict(zip(names, inputs))))
        except Exception as err:  # noqa: BLE001
            _fail_all(results, job, [(name, data)], subject, f"run failed: {err}")
            continue
        y = inject_fault(fault, y, job.dtype)
        outputs.update(stored.pack(job.op, name, y))
        where = {"layer": "2", "subject": subject, "case": name}
        torch_y = stored.unpack(job.op, data, "torch")
        results.add(against_reference(job.op, y, inputs, job.entry["attrs"], job.dtype, **where))
        if job.form.startswith("custom"):
            results.add(same_bits(job.op, y, torch_y, inputs, job.dtype,
                                  against="opforge_torch", max_ulp=SAME_KERNEL_ULP, **where))
        else:
            results.add(against_neighbour(job.op, y, torch_y, inputs, job.dtype,
                                          attrs=job.entry["attrs"], against="opforge_torch", **where))
    return outputs


def op_outputs(op, returned: list):
    """The op's outputs among a run's (the graph's outputs are the op's, in its order), as the
    spec's forms return them: a bare array for an op of one output."""
    return stored.from_tuple(op, returned[: len(op.outputs)])


def _run_refeval(results, job: Job, path: Path) -> None:
    from .refeval import evaluator

    subject = f"refeval.{job.form}"
    try:
        ref = evaluator(str(path))
    except Exception as err:  # noqa: BLE001
        _fail_all(results, job, job.cases, subject, f"reference evaluator refused the model: {err}")
        return
    for name, data in job.cases:
        inputs = _inputs(data)
        try:
            # output_names None: the evaluator returns a list (a dict only when asked for one)
            y = op_outputs(job.op, cast(list, ref.run(None, dict(zip(ref.input_names, inputs)))))
        except Exception as err:  # noqa: BLE001
            _fail_all(results, job, [(name, data)], subject, f"run failed: {err}")
            continue
        results.add(against_reference(job.op, y, inputs, job.entry["attrs"], job.dtype,
                                      layer="2", subject=subject, case=name))


def _fail_all(results, job: Job, cases, subject: str, message: str) -> None:
    for name, _ in cases:
        results.add(failed(message, against="reference", **job.where(subject, name)))
