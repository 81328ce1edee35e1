"""Layer 2, torch side: export one small model per op x dtype x (attributes, rank) in every form,
and write the spec's cases (inputs, float64 reference, opforge_torch output) next to them.

Folder layout (paths in manifest.json are relative to the folder):
  manifest.json                     what was exported, and what was not (with the reason)
  models/<entry>.<form>.onnx        forms: custom-ts, custom-dynamo, decomposed-ts, decomposed-dynamo
  data/<op>.<dtype>.<case>.npz      in0, in1, ... (inputs), reference (float64), torch (opforge_torch);
                                    an op of several outputs: reference@<output>, torch@<output> each
"""
from __future__ import annotations

import functools
import json
import logging
import os
import warnings
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .. import outputs
from .checks import spec
from .layer1 import TORCH_DTYPES, _attr_args, opforge_call, to_numpy, to_torch

DTYPES = ("float32", "float64")
NOT_EXPORTED = {
    "bfloat16": "ONNX Runtime's CPU EP has no bfloat16 Sigmoid/ReduceMean and opforge_ort's CPU "
                "kernels take float32/float64",
}
FORMS = ("custom-ts", "custom-dynamo", "decomposed-ts", "decomposed-dynamo")
DYNAMO_MIN_OPSET = 18
SAMPLE_DIMS = (3, 5, 7, 6)  # export-time shapes: no 0/1 sizes, which torch.export would specialize


class OpModule(torch.nn.Module):
    """One opforge op with fixed attributes: the graph every exporter sees."""

    def __init__(self, op, attrs: dict):
        super().__init__()
        self.fn, self.attrs = opforge_call(op), _attr_args(op, attrs)


class Unary(OpModule):
    def forward(self, x):
        return self.fn(x, *self.attrs)


class Weighted(OpModule):
    def forward(self, x, w):
        return self.fn(x, w, *self.attrs)


class ResidualWeighted(OpModule):
    def forward(self, x, r, w):
        return self.fn(x, r, w, *self.attrs)


# By the op's tensor inputs (the forward's parameter names are the dynamo exporter's input names,
# each input's role in lower case).
BY_INPUTS = {("X",): Unary, ("X", "W"): Weighted, ("X", "R", "W"): ResidualWeighted}
MODULES = {op.name: BY_INPUTS[tuple(op.inputs)] for op in spec.OPS.values()}


def entry_id(op, dtype: str, attrs: dict, rank: int) -> str:
    attr_text = "-".join(f"{k}{float(v):g}" for k, v in sorted(attrs.items())) or "default"
    return f"{op.name}.{dtype}.r{rank}.{attr_text}"


def sample_inputs(op, rank: int, dtype: str) -> tuple:
    """One tensor per input role: X (and a residual R of its shape) random, W a per-column
    weight around 1."""
    dims = SAMPLE_DIMS[:rank]
    if op.split > 1 and rank:  # the last axis holds every part
        dims = (*dims[:-1], op.split * dims[-1])
    torch_dtype = TORCH_DTYPES[dtype]
    gen = torch.Generator().manual_seed(0)  # the same example inputs, hence models, every run
    made = {"X": lambda: torch.randn(dims, dtype=torch_dtype, generator=gen),
            "R": lambda: torch.randn(dims, dtype=torch_dtype, generator=gen),
            "W": lambda: torch.rand(SAMPLE_DIMS[rank - 1], dtype=torch_dtype, generator=gen) + 0.5}
    return tuple(made[role]() for role in op.inputs)


def input_rank(role: str, rank: int) -> int:
    return 1 if role == "W" else rank  # R has X's shape


def dynamic_dims(op, rank: int, dynamo: bool) -> dict:
    """Every dimension dynamic: one model serves every case of its rank."""
    names = [role.lower() if dynamo else role for role in op.inputs]
    ranks = [input_rank(role, rank) for role in op.inputs]
    if dynamo:
        dim = torch.export.Dim.DYNAMIC
        return {"dynamic_shapes": {n: {i: dim for i in range(r)} for n, r in zip(names, ranks)}}
    axes = {n: {i: f"{n}_{i}" for i in range(r)} for n, r in zip(names, ranks)}
    for output in op.outputs:  # Y and a second output H have X's dims
        axes[output] = {i: f"X_{i}" for i in range(rank)}
    if op.split > 1 and rank:
        axes[op.outputs[0]][rank - 1] = "Y_part"  # a part of X's last axis, not equal to it
    return {"dynamic_axes": axes, "input_names": names, "output_names": list(op.outputs)}


def export_form(op, attrs, rank, dtype, *, form: str, path: Path, opset: int,
                ir_version: int | None):
    """Writes one model; returns its path, or the reason it was not written."""
    from opforge_torch import onnx as opforge_onnx

    dynamo = form.endswith("dynamo")
    if dynamo and opset < DYNAMO_MIN_OPSET:
        return {"skipped": f"the dynamo exporter writes opset >= {DYNAMO_MIN_OPSET}, this cell "
                           f"exports opset {opset}"}
    refusal = op.decomposed_refusal(attrs) if op.decomposed_refusal else None
    if form.startswith("decomposed") and refusal:
        return {"skipped": refusal}
    model = MODULES[op.name](op, attrs).eval()
    kw = dynamic_dims(op, rank, dynamo) if rank else {}
    if dynamo:
        kw["verbose"] = False
    opforge_onnx.export(model, sample_inputs(op, rank, dtype), str(path),
                        decomposed=form.startswith("decomposed"), dynamo=dynamo,
                        opset_version=opset, **kw)
    if ir_version:
        set_ir_version(path, ir_version)
    return str(path)


def set_ir_version(path: Path, ir_version: int) -> None:
    """Older runtimes (ORT < 1.18) refuse newer IR versions; the graph itself needs nothing newer."""
    import onnx

    model = onnx.load(str(path))
    if model.ir_version > ir_version:
        model.ir_version = ir_version
        for node in model.graph.node:  # node metadata came with IR 10
            del node.metadata_props[:]
        onnx.save(model, str(path))


def group_cases(op, dtype: str) -> dict:
    """{(attrs, rank): [case, ...]}: the cases one exported model serves."""
    groups: dict = {}
    for case in op.cases(dtype):
        key = (tuple(sorted(case.attrs.items())), np.ndim(case.inputs[0]))
        groups.setdefault(key, []).append(case)
    return groups


def export_all(out: Path, *, opset: int, ir_version: int | None = None, ops=None,
               dtypes=DTYPES, forms=FORMS, jobs: int = 1) -> dict:
    """Exports every op x dtype; `jobs` > 1 spreads the (op, dtype) pairs over that many processes
    (the manifest keeps spec order whatever finishes first)."""
    (out / "models").mkdir(parents=True, exist_ok=True)
    (out / "data").mkdir(parents=True, exist_ok=True)
    manifest: dict = {"torch": torch.__version__, "opset": opset, "ir_version": ir_version,
                "entries": [], "not_exported": []}
    ops = list(ops or spec.OPS.values())
    units = [(op.name, dtype) for op in ops for dtype in dtypes]
    export_unit = functools.partial(_export_op_dtype, out, opset=opset, ir_version=ir_version,
                                    forms=forms)
    if jobs > 1 and len(units) > 1:
        with ProcessPoolExecutor(min(jobs, len(units)), mp_context=get_context("spawn"),
                                 initializer=_export_worker) as pool:
            entries = list(pool.map(export_unit, *zip(*units)))
    else:
        entries = [export_unit(*unit) for unit in units]
    for op in ops:
        for dtype, reason in NOT_EXPORTED.items():
            manifest["not_exported"].append({"op": op.name, "dtype": dtype, "reason": reason})
    for part in entries:
        manifest["entries"] += part
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return manifest


def default_jobs() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _export_op_dtype(out: Path, op_name: str, dtype: str, *, opset, ir_version, forms) -> list:
    from opforge_torch.onnx import reuse_torchlib_registry

    reuse_torchlib_registry()  # one torchlib op list for every export of this process
    op = spec.OPS[op_name]
    return [_export_entry(out, op, dict(attrs), rank, dtype, cases=cases, opset=opset,
                          ir_version=ir_version, forms=forms)
            for (attrs, rank), cases in group_cases(op, dtype).items()]


def _export_worker() -> None:
    quiet_exporters()
    torch.set_num_threads(1)  # the processes are the parallelism; idle OpenMP threads spin


def quiet_exporters() -> None:
    """The exporters' progress lines and deprecation warnings would bury the report."""
    warnings.filterwarnings("ignore")
    for name in ("torch.onnx", "torch._dynamo", "torch.export", "onnxscript"):
        logging.getLogger(name).setLevel(logging.ERROR)


def _export_entry(out, op, attrs, rank, dtype, *, cases, opset, ir_version, forms) -> dict:
    eid = entry_id(op, dtype, attrs, rank)
    models = {}
    for form in forms:
        path = out / "models" / f"{eid}.{form}.onnx"
        try:
            result = export_form(op, attrs, rank, dtype, form=form, path=path, opset=opset,
                                 ir_version=ir_version)
        except Exception as err:  # noqa: BLE001  an export that breaks is a result to report
            result = {"error": f"{type(err).__name__}: {err}"[:2000]}
        models[form] = str(Path(result).relative_to(out)) if isinstance(result, str) else result
    return {"id": eid, "op": op.name, "dtype": dtype, "attrs": attrs, "rank": rank,
            "models": models, "cases": [_write_case(out, op, dtype, attrs, c) for c in cases]}


def _write_case(out: Path, op, dtype: str, attrs: dict, case) -> dict:
    inputs = [to_torch(a, dtype, "cpu") for a in case.inputs]
    torch_out = to_numpy(MODULES[op.name](op, attrs)(*inputs))
    path = out / "data" / f"{op.name}.{dtype}.{case.name}.npz"
    arrays: dict[str, Any] = {f"in{i}": np.asarray(a) for i, a in enumerate(case.inputs)}
    # one array per output: "reference"/"torch", or "reference@Y", "reference@H", ... (outputs.keys)
    np.savez(path, **outputs.pack(op, "reference", op.reference(*case.inputs, **case.attrs)),
             **outputs.pack(op, "torch", torch_out), **arrays)
    return {"name": case.name, "data": str(path.relative_to(out))}
