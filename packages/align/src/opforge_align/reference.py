"""The `reference` runtime: onnx's ReferenceEvaluator (numpy) on a float64 copy of the model, with
the opforge ops computed by the op spec's float64 references (opforge_spec): the value every other
runtime, whatever its precision, is judged against. An opforge node is refused as every layer
refuses it - its inputs, outputs, attributes and tensors by the spec's rules (node_checks) - with
one line naming the node."""
from __future__ import annotations

import numpy as np
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun

import opforge_spec as spec

from .errors import AlignError
from .model import NARROW_FLOATS, as_float64, dtype_names, np_dtype
from .node_checks import Context, Refused, checked_attributes
from .outputs import as_tuple


class _SpecOp(OpRun):
    op_domain = spec.DOMAIN
    spec_op: spec.OpSpec | None = None  # each op's subclass sets its op (_op_class)
    context = Context()                 # each run's subclass sets its own (_for_run)

    def _compute(self, arrays: tuple, attrs: dict) -> tuple:
        op = self.spec_op
        assert op is not None  # an op's subclass
        values = checked_attributes(op, self.onnx_node, arrays, attrs, self.context)
        # every output (AddRMSNorm's Y and H), in the node's output order, each of its dtype
        outputs = as_tuple(op, op.reference(*arrays, **values))
        return tuple(_typed(op, name, y, arrays[0].dtype, values, self.context)
                     for name, y in zip(op.outputs, outputs))


def _typed(op: spec.OpSpec, output: str, y, x_dtype, values: dict, context: Context):
    """An output of X's dtype as X's; one of its own (RMSNormQuant's Q and scale) as that dtype,
    or, in a float64 run, as the float64 the reference computed (downstream ops widen it anyway)."""
    if output not in op.output_dtypes:
        return y.astype(x_dtype)
    if context.widened:
        return np.asarray(y, np.float64)
    return np.asarray(y).astype(np_dtype(spec.DTYPE_CODES[op.output_dtype(output, "", values)]))


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
    context = _context(model, widened=precision == "float64")
    if precision == "float64":
        proto = as_float64(proto)
        feeds = {k: _widen(v) for k, v in feeds.items()}
    try:
        evaluator = ReferenceEvaluator(proto, new_ops=_for_run(context))
        results = evaluator.run(None, feeds, intermediate=True)
    except Refused as err:  # the spec's words, the node named
        raise AlignError(f"{model.path}: reference: {err}") from None
    except Exception as err:  # noqa: BLE001  the evaluator's refusal is the user's to read
        raise AlignError(f"{model.path}: reference: {type(err).__name__}: "
                         f"{_first_line(err)}") from None
    return {n: np.asarray(results[n]) for n in names if n in results}


def _context(model, *, widened: bool) -> Context:
    """What the opforge nodes of this run are told: the model's dtypes where the float64 copy
    hides them, and the report's label of each node."""
    dtypes = dtype_names(model.proto) if widened and model.has_domain(spec.DOMAIN) else {}
    return Context(dtypes=dtypes, widened=widened, labels={t.name: t.node for t in model.tensors})


def _for_run(context: Context) -> list:
    """The evaluator ops of one run: each op's class, told the run's context."""
    return [type(c.__name__, (c,), {"context": context}) for c in OP_CLASSES]


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
