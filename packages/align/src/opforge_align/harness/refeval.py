"""onnx's reference evaluator with the opforge ops computed by their independent float64 formulas
(opforge_spec.OpSpec.independent), on purpose not opforge_spec's reference (another formula, same
float64 precision): an independent third opinion on what the exported graph means (wiring,
attributes, defaults)."""
from __future__ import annotations

import numpy as np
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun

import opforge_spec as spec

from ..outputs import as_tuple


def _run(self, *arrays, **given):
    op = self.spec_op
    # onnx also offers attributes of its own op of the same name (ai.onnx Swish's alpha): dropped
    attrs = {name: a.default if given.get(name) is None else given[name]
             for name, a in op.attributes.items()}
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        ys = as_tuple(op, op.independent(*(a.astype(np.float64) for a in arrays), **attrs))
    return tuple(y.astype(arrays[0].dtype) for y in ys)


# One evaluator op per op of the spec.
OP_CLASSES = tuple(type(op.name, (OpRun,), {"op_domain": spec.DOMAIN, "spec_op": op, "_run": _run})
                   for op in spec.OPS.values())


def evaluator(model_path: str) -> ReferenceEvaluator:
    return ReferenceEvaluator(model_path, new_ops=list(OP_CLASSES))
