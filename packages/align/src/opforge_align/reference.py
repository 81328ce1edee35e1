"""The `reference` runtime: onnx's ReferenceEvaluator (numpy) on a float64 copy of the model, with
the opforge ops computed by the op spec's float64 references (opforge_spec): the value every other
runtime, whatever its precision, is judged against."""
from __future__ import annotations

import numpy as np
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun

import opforge_spec as spec

from .errors import AlignError
from .model import NARROW_FLOATS, as_float64, np_dtype
from .outputs import as_tuple


class _SpecOp(OpRun):
    op_domain = spec.DOMAIN
    spec_op: spec.OpSpec | None = None  # each op's subclass sets its op (_op_class)

    def _compute(self, arrays: tuple, attrs: dict) -> tuple:
        op = self.spec_op
        assert op is not None  # an op's subclass
        values = {}
        for name, attr in op.attributes.items():
            value = attr.default if attrs.get(name) is None else float(attrs[name])
            message = attr.error(op.name, value)
            if message:  # refused as every layer refuses it (the spec's rule and text)
                raise ValueError(message)
            values[name] = value
        # every output (AddRMSNorm's Y and H), in the node's output order
        return tuple(y.astype(arrays[0].dtype) for y in as_tuple(op, op.reference(*arrays, **values)))


def _run(self, *arrays, **attrs):
    # onnx also offers attributes of its own op of the same name (ai.onnx Swish's alpha): dropped
    return self._compute(arrays, {name: attrs.get(name) for name in self.spec_op.attributes})


def _op_class(op: spec.OpSpec) -> type:
    return type(op.name, (_SpecOp,), {"spec_op": op, "_run": _run})


# One evaluator op per op of the spec.
OP_CLASSES = tuple(_op_class(op) for op in spec.OPS.values())


def run(model, proto, feeds: dict, names: list, *, precision: str = "float64") -> dict:
    """`names` -> arrays computed by the reference evaluator. precision "float64": every float
    widened to float64 (inputs, initializers, constants, casts); "model": the model's dtypes."""
    _check_ops(model)
    if precision == "float64":
        proto = as_float64(proto)
        feeds = {k: _widen(v) for k, v in feeds.items()}
    try:
        evaluator = ReferenceEvaluator(proto, new_ops=list(OP_CLASSES))
        results = evaluator.run(None, feeds, intermediate=True)
    except Exception as err:  # noqa: BLE001  the evaluator's refusal is the user's to read
        raise AlignError(f"{model.path}: reference: {type(err).__name__}: "
                         f"{_first_line(err)}") from None
    return {n: np.asarray(results[n]) for n in names if n in results}


def _check_ops(model) -> None:
    implemented = {c.__name__ for c in OP_CLASSES}
    for t in model.tensors:
        domain, _, name = t.op.rpartition("::")
        if domain == spec.DOMAIN and name not in implemented:
            raise AlignError(f"{model.path}: reference: node {t.node}: opforge.{name} has no "
                             f"float64 reference here (known: {', '.join(sorted(implemented))})")


def _widen(array):
    array = np.asarray(array)
    narrow = {np.dtype(np_dtype(t)) for t in NARROW_FLOATS}
    return array.astype(np.float64) if array.dtype in narrow else array


def _first_line(err: Exception) -> str:
    lines = [line for line in str(err).splitlines() if line.strip()]
    return lines[0] if lines else "no detail"
