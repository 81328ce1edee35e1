"""ONNX export of the opforge ops: one ``opforge::<op>`` node per call, for every op of the spec.

- TorchScript exporter (``dynamo=False``): symbolics registered on import; export with
  ``custom_opsets={"opforge": 1}``.
- Dynamo exporter (``dynamo=True``, torch's default since 2.9): pass
  ``custom_translation_table=custom_translation_table()``; needs onnxscript.
- :func:`export` wraps both. ``decomposed=True`` emits standard ONNX ops instead (valid for
  opsets 13..21: the spec's ``OpSpec.decomposed``, walked by each exporter's emitter), for runtimes
  without the opforge kernels; ``decomposed="auto"`` per op the form the
  export table (:mod:`opforge_torch.export_table`) names for the target runtime, its version and
  the opset: the opforge node, the standard ONNX op (RMSNormalization-23, Swish-24, SwiGLU-28;
  dynamo exporter only: the TorchScript exporter writes opsets <= 20) or the decomposed form.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
from typing import Any, NoReturn

import torch
from torch.onnx import symbolic_helper

import opforge_spec

from . import _checks, export_table
from ._checks import attributes as _check_attributes

DOMAIN = opforge_spec.DOMAIN
DOMAIN_VERSION = opforge_spec.DOMAIN_VERSION
_TORCH_ARGS = {"X": "x", "R": "residual", "W": "weight"}  # ONNX input name -> the schemas' argument
OPSET_RANGE = (13, 21)  # standard-ONNX opsets the decomposed graphs are written for
DYNAMO_MIN_OPSET = 18  # the dynamo exporter refuses lower targets
_FLOAT_TYPES = ("tensor(float)", "tensor(float16)", "tensor(bfloat16)", "tensor(double)")

_LOG = logging.getLogger(__name__)
_state: dict[str, frozenset[str]] = {"decomposed": frozenset()}  # names of the ops the TorchScript symbolics decompose

# Per target runtime, the ops whose decomposed form the runtime fuses itself (decomposed="auto" reads
# this from the export table's "prefer" entries now, opforge_torch/export_table.json; kept for
# callers): the ops exported in standard ONNX because the runtime
# fuses that form itself and its own graph passes know only that form (measured: bench/README.md,
# "Real models"). ONNX Runtime's CPU EP fuses x*sigmoid(x) into com.microsoft QuickGelu, which its
# NCHWc layout pass keeps in the blocked layout; around an opforge Swish node (a custom op cannot
# join that layout) it inserts Reorder copies. SwiGLU and RMSNorm stay opforge nodes: ORT 1.32
# fuses neither decomposed form (a LLaMA decoder layer's optimized graph keeps Slice+Sigmoid+Mul+Mul
# and Pow+ReduceMean+...; no SimplifiedLayerNormalization). TensorRT: nothing measured here (no
# runtime on these machines), so every op stays an opforge node.
RUNTIME_FUSES = {"onnxruntime": frozenset({"Swish"}), "tensorrt": frozenset()}


# --------------------------------------------------------------------------------------------
# Mixed dtypes: a float32 W beside a 16-bit X (opforge_spec.weight_dtypes)
# --------------------------------------------------------------------------------------------
_FLOAT32 = export_table.FLOAT32


def _mixed_x_type(spec: opforge_spec.OpSpec, codes) -> int | None:
    """X's ONNX element type when W's is not X's (a float32 W beside a 16-bit X: the op refused any
    other pair while the model was traced), else None; `codes` the call's tensor inputs' element
    types in the spec's order (None where the exporter does not know one)."""
    named = dict(zip(spec.inputs, codes))
    x, w = named.get("X"), named.get("W")
    return x if x is not None and w is not None and w != x else None


def write_decomposed(e, spec: opforge_spec.OpSpec, tensors, attrs, x_type: int | None = None):
    """The op's decomposed form (OpSpec.decomposed) through an emitter. A mixed call (`x_type`: X's
    ONNX element type, W float32) is computed in float32 as the kernels compute it, since ONNX
    arithmetic takes one type: X upcast (for an op with a residual, H = X + R in X's dtype first,
    as every layer rounds it, then upcast: the form adds a float32 zero to it), W as given; the
    outputs of X's dtype are cast back to it, H is the rounded sum itself."""
    decompose = spec.decomposed
    assert decompose is not None, f"opforge.{spec.name} has no decomposed form"  # the export plans none
    if x_type is None:
        return decompose(e, *tensors, *attrs)
    named = dict(zip(spec.inputs, tensors))
    rounded = e.op("Add", named["X"], named["R"]) if "R" in named else named["X"]
    wide = e.op("Cast", rounded, to=_FLOAT32)
    inputs = {"X": wide, "W": named["W"]}
    if "R" in named:
        inputs["R"] = e.scalar(0.0, wide)
    outputs = decompose(e, *(inputs[n] for n in spec.inputs), *attrs)
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)

    def narrowed(name, value):  # an output of its own dtype (Q, Scale) stays as it is
        if name == "H":
            return rounded
        return value if name in spec.output_dtypes else e.op("Cast", value, to=x_type)

    results = tuple(narrowed(name, value) for name, value in zip(spec.outputs, outputs))
    return results if len(results) > 1 else results[0]


# --------------------------------------------------------------------------------------------
# TorchScript exporter
# --------------------------------------------------------------------------------------------
# TorchScript scalar type names -> torch dtypes (ONNX arithmetic does not promote, so constants
# must carry X's dtype).
_TS_DTYPES = {"Float": torch.float32, "Double": torch.float64, "Half": torch.float16,
              "BFloat16": torch.bfloat16}


def _ts_dtype(value):
    return _TS_DTYPES.get(value.type().scalarType(), torch.float32)


def _ts_dtype_code(value) -> int | None:
    """A traced value's ONNX element type, None where the trace does not know it."""
    dtype = _TS_DTYPES.get(value.type().scalarType())
    return None if dtype is None else opforge_spec.DTYPE_CODES[str(dtype).removeprefix("torch.")]


def _ts_constant(g, number, like):
    return g.op("Constant", value_t=torch.tensor(number, dtype=_ts_dtype(like)))


def _ts_ints(g, values):
    return g.op("Constant", value_t=torch.tensor(values, dtype=torch.int64))


def _ts_attribute_name(name: str, value) -> str:
    """g.op's keyword for an attribute: its name with the suffix of its type."""
    if isinstance(value, (list, tuple)):
        return f"{name}_i"
    suffixes = {int: "_i", float: "_f", str: "_s"}
    if type(value) not in suffixes:
        raise TypeError(f"opforge_torch.onnx: attribute {name}: unsupported value {value!r}")
    return name + suffixes[type(value)]


class _TorchScriptEmitter:
    """The emitter of the spec's decompositions (OpSpec.decomposed) for the TorchScript exporter."""

    def __init__(self, g):
        self._g = g

    def op(self, op_type, *inputs, **attributes):
        named = {_ts_attribute_name(k, v): v for k, v in attributes.items()}
        return self._g.op(op_type, *inputs, **named)

    def scalar(self, value, like):
        return _ts_constant(self._g, value, like)

    def ints(self, values):
        return _ts_ints(self._g, list(values))

    def reduce_mean(self, x, axes):
        if self._g.opset >= 18:  # ReduceMean's axes moved from attribute to input at opset 18
            return self._g.op("ReduceMean", x, self.ints(axes), keepdims_i=1)
        return self._g.op("ReduceMean", x, axes_i=list(axes), keepdims_i=1)

    def reduce_max(self, x, axes):
        if self._g.opset >= 18:  # as ReduceMean's
            return self._g.op("ReduceMax", x, self.ints(axes), keepdims_i=1)
        return self._g.op("ReduceMax", x, axes_i=list(axes), keepdims_i=1)

    def tiny(self, like):
        return self.scalar(torch.finfo(_ts_dtype(like)).tiny, like)


def _attr_type(attr: opforge_spec.Attr) -> type:
    """An attribute's Python (and ONNX attribute) type: float, or int for int and enum attributes."""
    return float if attr.kind == "float" else int


def _signature(spec: opforge_spec.OpSpec, leading: tuple = ()) -> inspect.Signature:
    """The schema's parameters (tensor inputs, then each attribute with its default and type)."""
    parameter = inspect.Parameter
    names = [*leading, *(_TORCH_ARGS[i] for i in spec.inputs)]
    tensors = [parameter(n, parameter.POSITIONAL_OR_KEYWORD) for n in names]
    attrs = [parameter(a.name, parameter.POSITIONAL_OR_KEYWORD, default=_attr_type(a)(a.default),
                       annotation=_attr_type(a)) for a in spec.attributes.values()]
    return inspect.Signature([*tensors, *attrs])


def _node_attributes(spec: opforge_spec.OpSpec, attrs) -> dict:
    """The node's attributes: each value as its attribute's type."""
    return {name: _attr_type(a)(value) for (name, a), value in zip(spec.attributes.items(), attrs)}


def _split_call(spec: opforge_spec.OpSpec, args) -> tuple:
    """(tensors, attributes) of a call's arguments, the attributes checked by the shared rule."""
    count = len(spec.inputs)
    tensors, attrs = tuple(args[:count]), tuple(args[count:])
    _check_attributes(spec, attrs)
    return tensors, attrs


def _ts_output_type(g, spec: opforge_spec.OpSpec, x):
    """Y's type by the spec's shape rule, X's dtype, and X's dim symbols (dynamic axes) where Y
    keeps X's dims. A TensorType with symbolic dims cannot be built from Python, so for an op that
    splits the last axis the type is taken from a standard Slice of X to Y's extent, typed by the
    exporter's ONNX shape inference; that Slice has no use, and the exporter's dead-code pass
    drops it before the model is written."""
    if spec.split == 1:
        return x.type()
    last = (x.type().varyingSizes() or [None])[-1]
    if last is None:
        end = g.op("Div", g.op("Gather", g.op("Shape", x), _ts_ints(g, [-1]), axis_i=0),
                   _ts_ints(g, [spec.split]))
    else:
        end = _ts_ints(g, [spec.output_shape((last,))[-1]])
    return g.op("Slice", x, _ts_ints(g, [0]), end, _ts_ints(g, [-1])).type()


def _ts_row_type(g, x):
    """X's type with the last dim 1 (X's dim symbols kept), from a ReduceMax over the last axis
    typed by the exporter's shape inference; unused, so dropped before the model is written."""
    if g.opset >= 18:  # ReduceMax's axes moved from attribute to input at opset 18
        return g.op("ReduceMax", x, _ts_ints(g, [-1]), keepdims_i=1).type()
    return g.op("ReduceMax", x, axes_i=[-1], keepdims_i=1).type()


def _ts_output_types(g, spec: opforge_spec.OpSpec, x, attrs) -> list:
    """Each output's type: its shape by its rule (the op's, X's, or X's with the last dim 1), its
    dtype X's or its own (OpSpec.output_dtypes; an enum attribute's value picks it)."""
    rules = {"split": lambda: _ts_output_type(g, spec, x), "x": x.type, "row": lambda: _ts_row_type(g, x)}
    dtypes = _checks.output_dtypes(spec, _ts_dtype(x), attrs)
    typed = []
    for name, dtype in zip(spec.outputs, dtypes):
        output_type = rules[spec.shape_rule(name)]()
        typed.append(output_type.with_dtype(dtype) if name in spec.output_dtypes else output_type)
    return typed


def _ts_opforge_node(g, spec: opforge_spec.OpSpec, tensors, attrs):
    """The one opforge node of a call, every output typed (TorchScript's ONNX shape inference knows
    no opforge schema: untyped outputs would leave every shape downstream unknown)."""
    named = {_ts_attribute_name(k, v): v for k, v in _node_attributes(spec, attrs).items()}
    outputs = g.op(f"{DOMAIN}::{spec.name}", *tensors, outputs=len(spec.outputs), **named)
    values = outputs if isinstance(outputs, tuple) else (outputs,)
    for value, output_type in zip(values, _ts_output_types(g, spec, tensors[0], attrs)):
        value.setType(output_type)
    return outputs


def _ts_symbolic(spec: opforge_spec.OpSpec):
    """One opforge node (or the decomposed graph) for a call: tensor inputs, then the attributes."""
    def symbolic(g, *args):
        tensors, attrs = _split_call(spec, args)
        if spec.name in _state["decomposed"]:
            x_type = _mixed_x_type(spec, [_ts_dtype_code(t) for t in tensors])
            return write_decomposed(_TorchScriptEmitter(g), spec, tensors, attrs, x_type)
        return _ts_opforge_node(g, spec, tensors, attrs)

    # parse_args names each argument from the signature (g, then the schema's arguments)
    symbolic.__signature__ = _signature(spec, leading=("g",))  # type: ignore[attr-defined]  # read by inspect.signature
    kinds: list[Any] = ["f" if a.kind == "float" else "i" for a in spec.attributes.values()]
    return symbolic_helper.parse_args(*("v" * len(spec.inputs)), *kinds)(symbolic)


def _register_torchscript_symbolics():
    from torch.onnx import register_custom_op_symbolic

    for spec in opforge_spec.OPS.values():
        register_custom_op_symbolic(f"{DOMAIN}::{spec.torch_name}", _ts_symbolic(spec), OPSET_RANGE[0])


# --------------------------------------------------------------------------------------------
# Dynamo exporter
# --------------------------------------------------------------------------------------------
def register_onnx_schemas():
    """Registers the opforge ONNX schemas in-process (onnxscript refuses ops without one)."""
    from onnx import defs, helper

    param = defs.OpSchema.FormalParameter

    def attribute(name, attr):
        default = _attr_type(attr)(attr.default)
        return defs.OpSchema.Attribute(name, helper.make_attribute(name, default), name)

    def schema(op):
        outputs, constraints = _schema_outputs(op)
        if "W" in op.inputs:  # X's type, or float32 beside a 16-bit X (opforge_spec.weight_dtypes)
            constraints.append(("TW", list(_FLOAT_TYPES), "W's type: X's, or float32 with a float16 or bfloat16 X"))
        return defs.OpSchema(
            op.name, DOMAIN, DOMAIN_VERSION, doc=op.doc,
            inputs=[param(n, "TW" if n == "W" else "T") for n in op.inputs],
            outputs=[param(n, t) for n, t in outputs],
            type_constraints=[("T", list(_FLOAT_TYPES), "floating-point tensors"), *constraints],
            attributes=[attribute(name, attr) for name, attr in op.attributes.items()],
        )

    for op in opforge_spec.OPS.values():  # each op once per process, whichever came before
        if not defs.has(op.name, DOMAIN_VERSION, DOMAIN):
            defs.register_schema(schema(op))


_ONNX_TYPES = {"float32": "tensor(float)", "float16": "tensor(float16)", "bfloat16": "tensor(bfloat16)",
               "float64": "tensor(double)", "int8": "tensor(int8)", "float8_e4m3fn": "tensor(float8e4m3fn)"}


def _schema_outputs(op: opforge_spec.OpSpec) -> tuple:
    """Each output's (name, type constraint) and the constraints beyond X's T: an output of its own
    dtype gets one of its own (fixed, or the choices of the enum attribute that picks it)."""
    outputs, constraints = [], []
    for name in op.outputs:
        rule = op.output_dtypes.get(name)
        if rule is None:
            outputs.append((name, "T"))
            continue
        types = [_ONNX_TYPES[n] for n in op.attributes[rule].choices] if rule in op.attributes else [_ONNX_TYPES[rule]]
        outputs.append((name, f"T{name}"))
        constraints.append((f"T{name}", types, f"the type of {name}"))
    return outputs, constraints


def custom_translation_table(*, decomposed: bool = False) -> dict:
    """``{torch op overload: onnxscript function}`` for the dynamo exporter.

    One opforge node per call, or (``decomposed=True``) standard ONNX ops written for opset 18,
    whose schemas are unchanged up to opset 21 (the dynamo exporter writes opset >= 18 only).
    """
    return _decomposed_table() if decomposed else _opforge_table()


def _with_signature(function, spec: opforge_spec.OpSpec):
    """`function(*args, **kwargs)` with the op's parameters, which the dynamo exporter reads (tensor
    inputs unannotated, the attributes floats)."""
    function.__signature__ = _signature(spec)
    function.__annotations__ = {name: _attr_type(a) for name, a in spec.attributes.items()}
    function.__name__ = spec.torch_name
    return function


def _opforge_node(opset, spec: opforge_spec.OpSpec):
    node = getattr(opset, spec.name)

    def translate(*args, **kwargs):
        bound = inspect.signature(translate).bind(*args, **kwargs)
        bound.apply_defaults()
        tensors, attrs = _split_call(spec, tuple(bound.arguments.values()))
        outputs = node(*tensors, **_node_attributes(spec, attrs))
        _type_own_outputs(spec, tensors[0], attrs, outputs)
        return outputs

    return _with_signature(translate, spec)


def _retype_own_outputs(path) -> None:
    """Types again, in the written model, the outputs of their own dtype that the dynamo exporter's
    graph optimizer untyped: its ONNX shape inference of an opforge node (whose schema lists every
    choice of such an output's dtype) replaces the type _type_own_outputs gave with none."""
    import onnx

    if not any(op.output_dtypes for op in opforge_spec.OPS.values()):
        return
    proto = onnx.load(str(path), load_external_data=False)
    infos = {v.name: v for v in (*proto.graph.input, *proto.graph.value_info, *proto.graph.output)}
    changed = False
    for node in proto.graph.node:
        spec = opforge_spec.OPS.get(node.op_type) if node.domain == DOMAIN else None
        if spec is None or not spec.output_dtypes:
            continue
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        for name, value_name in zip(spec.outputs, node.output):
            info = infos.get(value_name)
            if name in spec.output_dtypes and info is not None and not info.type.tensor_type.elem_type:
                _retype(info, infos.get(node.input[0]), spec, name, attrs)
                changed = True
    if changed:
        onnx.save(proto, str(path))


def _retype(info, x_info, spec: opforge_spec.OpSpec, name: str, attrs: dict) -> None:
    """`info` typed as output `name` of `spec`: its dtype by the call's attributes, its shape X's
    (the last dim 1 for a row output)."""
    tensor_type = info.type.tensor_type
    tensor_type.elem_type = opforge_spec.DTYPE_CODES[spec.output_dtype(name, "", attrs)]
    if x_info is None or not x_info.type.tensor_type.HasField("shape"):
        return
    tensor_type.shape.CopyFrom(x_info.type.tensor_type.shape)
    if spec.shape_rule(name) == "row" and tensor_type.shape.dim:
        last = tensor_type.shape.dim[-1]
        last.Clear()
        last.dim_value = 1


def _type_own_outputs(spec: opforge_spec.OpSpec, x, attrs, outputs) -> None:
    """Types the outputs of their own dtype (OpSpec.output_dtypes): the schema's type constraint of
    one picked by an attribute lists every choice, so onnxscript cannot infer it."""
    import onnx_ir as ir

    values = dict(zip(spec.attributes, attrs))
    for name, value in zip(spec.outputs, outputs if isinstance(outputs, tuple) else (outputs,)):
        if name not in spec.output_dtypes:
            continue
        value.dtype = ir.DataType(opforge_spec.DTYPE_CODES[spec.output_dtype(name, "", values)])
        if x.shape is not None:
            dims = list(x.shape)
            value.shape = ir.Shape(dims[:-1] + [1] if spec.shape_rule(name) == "row" else dims)


def _opforge_table():
    import onnxscript

    register_onnx_schemas()
    opforge = onnxscript.values.Opset(DOMAIN, DOMAIN_VERSION)
    return {getattr(torch.ops.opforge, spec.torch_name).default: _opforge_node(opforge, spec)
            for spec in opforge_spec.OPS.values()}


class _DynamoEmitter:
    """The emitter of the spec's decompositions (OpSpec.decomposed) for the dynamo exporter."""

    def __init__(self, opset):
        self._opset = opset

    def op(self, op_type, *inputs, **attributes):
        return getattr(self._opset, op_type)(*inputs, **attributes)

    def scalar(self, value, like):
        # a double constant, rounded once to `like`'s type: a float one would round GeGLU's
        # sqrt(2/pi) to float32 for float64 inputs (1e-7 off)
        import onnx  # the dynamo exporter's dependency, as onnxscript

        constant = onnx.helper.make_tensor("value", onnx.TensorProto.DOUBLE, [], [float(value)])
        return self._opset.CastLike(self._opset.Constant(value=constant), like)

    def ints(self, values):
        return self._opset.Constant(value_ints=list(values))

    def reduce_mean(self, x, axes):
        return self._opset.ReduceMean(x, self.ints(axes), keepdims=1)

    def reduce_max(self, x, axes):
        return self._opset.ReduceMax(x, self.ints(axes), keepdims=1)

    def tiny(self, like):  # float32's: a traced value's type may not be known yet
        return self.scalar(torch.finfo(torch.float32).tiny, like)


def _ir_dtype_codes(tensors) -> list:
    """The dynamo exporter's values' ONNX element types (onnx_ir DataType), None where unknown."""
    return [None if getattr(t, "dtype", None) is None else int(t.dtype) for t in tensors]


def _decomposed_node(emitter, spec: opforge_spec.OpSpec):
    def translate(*args, **kwargs):
        bound = inspect.signature(translate).bind(*args, **kwargs)
        bound.apply_defaults()
        tensors, attrs = _split_call(spec, tuple(bound.arguments.values()))
        return write_decomposed(emitter, spec, tensors, attrs, _mixed_x_type(spec, _ir_dtype_codes(tensors)))

    return _with_signature(translate, spec)


def _decomposed_table():
    from onnxscript import opset18

    emitter = _DynamoEmitter(opset18)
    return {getattr(torch.ops.opforge, spec.torch_name).default: _decomposed_node(emitter, spec)
            for spec in opforge_spec.OPS.values()}


# --------------------------------------------------------------------------------------------
# The standard ONNX op of an op (decomposed="auto" where the table names it: export_table)
# --------------------------------------------------------------------------------------------
def _standard_node(opset_version: int, spec: opforge_spec.OpSpec, fallback):
    """The op's standard ONNX op at `opset_version` (export_table.write_standard); a call the
    standard op computes otherwise (export_table.standard_form_refusal: RMSNorm's epsilon 0)
    takes `fallback`'s form, and the log says so."""
    from onnxscript import values

    emitter = _DynamoEmitter(values.Opset("", opset_version))

    def translate(*args, **kwargs):
        bound = inspect.signature(translate).bind(*args, **kwargs)
        bound.apply_defaults()
        tensors, attrs = _split_call(spec, tuple(bound.arguments.values()))
        x_dtype = getattr(tensors[0], "dtype", None)  # onnx_ir's DataType where known
        refusal = export_table.standard_form_refusal(spec.name, dict(zip(spec.attributes, attrs)),
                                                     None if x_dtype is None else str(x_dtype))
        if refusal:
            _LOG.info("opforge_torch.onnx: a %s call keeps its planned fallback form: %s",
                      spec.name, refusal)
            return fallback(*args, **kwargs)
        x_type = _mixed_x_type(spec, _ir_dtype_codes(tensors))
        return export_table.write_standard(emitter, spec.name, *tensors, *attrs, x_type=x_type)

    return _with_signature(translate, spec)


def _planned_table(plan: export_table.ExportPlan) -> dict:
    """The dynamo translation table of an export plan: each op in its planned form; a standard
    op's call it cannot take falls back to the opforge node."""
    table = _translation_table(plan.ops("decomposed"))
    for spec in opforge_spec.OPS.values():
        if plan.form(spec.name) == "standard":
            key = getattr(torch.ops.opforge, spec.torch_name).default
            table[key] = _standard_node(plan.opset, spec, fallback=table[key])
    return table


def _check_written_opset(path, plan: export_table.ExportPlan) -> None:
    """The dynamo exporter writes opset 18 and converts it to the asked opset; where its converter
    knows no adapter for a standard op (RMSNormalization above opset 25 with onnxscript 0.7) it
    keeps opset 18 and says so only in its log: refused here, the opset named."""
    import onnx

    standard = plan.ops("standard")
    if not standard:
        return
    written = {o.domain: o.version for o in onnx.load(path, load_external_data=False).opset_import}
    if written.get("", written.get("ai.onnx")) != plan.opset:
        raise RuntimeError(
            f"opforge_torch.onnx.export: opset_version: expected the model written at opset "
            f"{plan.opset} (the standard op of {', '.join(sorted(standard))}), got opset "
            f"{written.get('', written.get('ai.onnx'))}: the dynamo exporter could not convert "
            f"it; pass a lower opset_version or decomposed=False")


# --------------------------------------------------------------------------------------------
# The .out overloads: exported as the op itself, its results flowing to the written tensors
# --------------------------------------------------------------------------------------------
# An .out call returns nothing: an exporter that records it as is has no value for the later uses of
# the tensors it wrote (the TorchScript exporter then drops the call; the dynamo one cannot translate
# the auto_functionalized node). Both see instead the op's call, whose results the written tensors
# hold from then on: one opforge node per call, read by those later uses.
_TRACER_LIBRARY = torch.library.Library("opforge", "IMPL")  # kept: its registrations live as long as it
_TRACER: Any = torch._C  # the tracer's value map (_get_value_trace, _set_value_trace) has no stubs


def _results(value) -> tuple:
    return value if isinstance(value, tuple) else (value,)


@contextlib.contextmanager
def _tracing_suspended():
    state = torch._C._get_tracing_state()
    torch._C._set_tracing_state(None)
    try:
        yield
    finally:
        torch._C._set_tracing_state(state)


_SLICES = ("aten::slice", "aten::select")  # the views the TorchScript exporter writes through


def _is_view(node) -> bool:
    """Whether a traced node's output aliases an input without writing it (a view, contiguous())."""
    if not node.kind().startswith("aten::") or node.schema() == "(no schema)":
        return False
    returns = torch._C.parse_schema(node.schema()).returns
    return any(r.alias_info is not None and not r.alias_info.is_write for r in returns)


def _slices(value) -> list:
    """The traced slice/select nodes that `value` comes from, nearest first (as the exporter sees
    them; the eager view relationship may differ: a Linear's 3-D output is an eager view)."""
    chain = []
    while value.node().kind() in _SLICES:
        chain.append(value.node())
        value = next(value.node().inputs())  # the sliced tensor
    return chain


def _axes_ascend(nodes) -> bool:
    """Whether slices and selects, from the base on, each index an axis after the ones before."""
    first_free = 0
    for node in nodes:
        rank = next(node.inputs()).type().dim()
        axis = node.inputsAt(1).toIValue() % rank
        if axis < first_free:
            return False
        first_free = axis + 1 if node.kind() == "aten::slice" else axis  # select drops its axis
    return True


def _refuse_untraceable_write(spec: opforge_spec.OpSpec, name: str, got: str) -> NoReturn:
    raise RuntimeError(opforge_spec.error(
        spec.name, name, "a tensor, or a slice or index of one, that no other view shares (the "
        "TorchScript exporter carries a write to nothing else; export with dynamo=True, the default)",
        got))


def _trace_write(spec: opforge_spec.OpSpec, name: str, out: torch.Tensor, result: torch.Tensor) -> None:
    """Records `out` holding `result` (its values are there already). A tensor that is no view in
    the trace stands for the op's result from here on, so later uses read the node's output
    directly; a slice or index is copied into (the exporter rewrites the base's later uses), the
    copy and the slices given one source line: the exporter follows slices and selects to their
    base only on the write's line. Any other view, of `out` or of its base, is refused: its later
    uses would read the old values in the exported graph."""
    chain = _slices(_TRACER._get_value_trace(out))
    base = next(chain[-1].inputs()) if chain else _TRACER._get_value_trace(out)
    if _is_view(base.node()):
        _refuse_untraceable_write(spec, name, f"a view made by {base.node().kind()}")
    if not _axes_ascend(chain[::-1]):  # b[1:][:, 2:]: the exporter fails an internal assert on it
        _refuse_untraceable_write(spec, name, "slices going back to an earlier axis")
    others = [use.user.kind() for use in base.uses() if _is_view(use.user) and use.user not in chain[-1:]]
    if others:
        _refuse_untraceable_write(spec, name, f"one with a view made by {others[0]} before the call")
    if not chain:
        _TRACER._set_value_trace(out, _TRACER._get_value_trace(result))
        return
    out.copy_(result)
    write = _TRACER._get_value_trace(out).node()
    for node in chain:
        node.copyMetadata(write)


def _traced_out(spec: opforge_spec.OpSpec):
    """The .out overload's kernel at the tracer (the TorchScript exporter's, torch.jit.trace's)."""
    op = getattr(torch.ops.opforge, spec.torch_name)

    def kernel(*args, **outs):
        results = _results(op.default(*args))  # recorded: the op's node
        with _tracing_suspended():
            op.out(*args, **outs)  # not recorded: the kernels' checks of the outputs, and the write
        for name, result in zip(_checks.out_names(spec), results):
            _trace_write(spec, name, outs[name], result)

    return kernel


def _exported_out(spec: opforge_spec.OpSpec):
    """The .out overload under torch.export (the dynamo exporter's), which functionalizes the op and
    the copies. Elsewhere (torch.compile) NotImplemented: there it stays auto_functionalized and is
    written in place."""
    op = getattr(torch.ops.opforge, spec.torch_name)

    def decompose(*args, **outs):
        if not torch.compiler.is_exporting():
            return NotImplemented
        written = tuple(outs[name] for name in _checks.out_names(spec))
        count = len(spec.inputs)
        tensors, attrs = args[:count], _with_defaults(spec, args)[count:]
        _checks.op(spec, tensors, attrs)  # the fake .out kernel's checks: a copy never broadcasts nor casts
        _checks.outs(spec, written, tensors[0], attrs)
        for out, result in zip(written, _results(op.default(*args))):
            out.copy_(result)
        return None

    return decompose


def _with_defaults(spec: opforge_spec.OpSpec, args: tuple) -> tuple:
    """A call's arguments with the attributes left out (the trailing ones) given their defaults."""
    defaults = tuple(spec.defaults().values())
    return (*args, *defaults[len(args) - len(spec.inputs):])


def _register_out_exports():
    for spec in opforge_spec.OPS.values():
        _TRACER_LIBRARY.impl(f"{spec.torch_name}.out", _traced_out(spec), "Tracer")
        out = getattr(torch.ops.opforge, spec.torch_name).out
        out.py_impl(torch._C.DispatchKey.CompositeImplicitAutograd)(_exported_out(spec))


# --------------------------------------------------------------------------------------------
# One entry point
# --------------------------------------------------------------------------------------------
@contextlib.contextmanager
def _decomposed(ops: frozenset):
    previous, _state["decomposed"] = _state["decomposed"], ops
    try:
        yield
    finally:
        _state["decomposed"] = previous


def default_opset() -> int:
    """The opset torch's exporters (both) write when not given one."""
    from torch.onnx import _constants

    return getattr(_constants, "ONNX_DEFAULT_OPSET", DYNAMO_MIN_OPSET)


def export_plan(runtime: str = "onnxruntime", runtime_version: str | None = None,
                opset: int | None = None) -> export_table.ExportPlan:
    """What ``export(..., decomposed="auto", runtime=..., runtime_version=...,
    opset_version=opset)`` writes per op, and why (``str()`` of it is the report; ``export``
    logs it at INFO). ``runtime_version=None``: the installed runtime's version, else the
    table's oldest row."""
    return export_table.plan(runtime, runtime_version, opset or default_opset())


def decomposed_ops(decomposed: bool | str, runtime: str = "onnxruntime",
                   runtime_version: str | None = None, opset: int | None = None) -> frozenset:
    """The names of the ops that ``export(..., decomposed=decomposed, runtime=runtime)`` writes
    in their decomposed form (``export_plan`` has every op's form for ``"auto"``)."""
    if decomposed is True or decomposed is False:
        return frozenset(opforge_spec.OPS) if decomposed else frozenset()
    _check_decomposed(decomposed)
    return export_plan(runtime, runtime_version, opset).ops("decomposed")


def _check_decomposed(decomposed) -> None:
    if decomposed not in (True, False, "auto"):
        raise ValueError(f"opforge_torch.onnx.export: decomposed: expected True, False or 'auto', "
                         f"got {decomposed!r}")


def _translation_table(ops: frozenset) -> dict:
    """The opforge node of every op, the decomposed graph of those in `ops`."""
    table = custom_translation_table(decomposed=False)
    if ops:
        standard = custom_translation_table(decomposed=True)
        names = {getattr(torch.ops.opforge, s.torch_name).default: s.name
                 for s in opforge_spec.OPS.values()}
        table.update({k: v for k, v in standard.items() if names.get(k) in ops})
    return table


def _opforge_error(error: BaseException | None) -> RuntimeError | None:
    """The opforge op's refusal (bad input) among the errors that led to `error`, if any."""
    while error is not None:
        if isinstance(error, RuntimeError) and str(error).startswith(f"{DOMAIN}."):
            return error
        error = error.__cause__ or error.__context__
    return None


@contextlib.contextmanager
def _opforge_errors_first():
    """An op's refusal as its one line, not inside the dynamo exporter's report of a failed step."""
    try:
        yield
    except Exception as error:
        refusal = _opforge_error(error)
        if refusal is None or refusal is error:
            raise
        raise RuntimeError(str(refusal).splitlines()[0]) from error


def export(model, args, path, *, decomposed: bool | str = False, runtime: str = "onnxruntime",
           runtime_version: str | None = None, dynamo: bool | None = None, **kw):
    """Exports ``model(*args)`` to ``path`` and returns ``path``.

    ``dynamo=None`` (default) picks torch's recommended dynamo exporter (torch.export + the custom
    translation table), except for ``opset_version`` < 18, which only the TorchScript exporter
    writes; ``dynamo=False`` forces the TorchScript exporter (registered symbolics).
    ``decomposed=True`` writes standard ONNX ops only; ``decomposed="auto"`` writes each op in the
    form the export table names for ``runtime`` ("onnxruntime", "tensorrt") at ``runtime_version``
    (None: the installed one's) and the opset: the opforge node, the standard ONNX op or the
    decomposed form (:func:`export_plan` says which and why; logged at INFO). Other keywords (``opset_version``,
    ``input_names``, ``dynamic_axes`` / ``dynamic_shapes``, ...) go to ``torch.onnx.export``.
    """
    args = args if isinstance(args, tuple) else (args,)
    _check_decomposed(decomposed)
    opset = kw.get("opset_version")
    if dynamo is None:
        dynamo = opset is None or opset >= DYNAMO_MIN_OPSET
    if dynamo and opset is not None and opset < DYNAMO_MIN_OPSET:
        raise ValueError(
            f"opforge_torch.onnx.export: opset_version: expected >= {DYNAMO_MIN_OPSET} with the "
            f"dynamo exporter, got {opset}; pass dynamo=False (TorchScript exporter) for opsets "
            f"{OPSET_RANGE[0]}..{DYNAMO_MIN_OPSET - 1}")
    plan = export_plan(runtime, runtime_version, opset) if decomposed == "auto" else None
    if plan is not None:
        _LOG.info("%s", plan)
    ops = plan.ops("decomposed") if plan else decomposed_ops(decomposed)
    if dynamo:
        planned = _planned_table(plan) if plan else _translation_table(ops)
        table = {**planned, **kw.pop("custom_translation_table", {})}
        with _opforge_errors_first():
            torch.onnx.export(model, args, path, dynamo=True, custom_translation_table=table, **kw)
        _retype_own_outputs(path)
        if plan is not None:
            _check_written_opset(path, plan)
        return path
    with _decomposed(ops):
        custom = {} if ops == frozenset(opforge_spec.OPS) else {DOMAIN: DOMAIN_VERSION}
        kw["custom_opsets"] = {**custom, **kw.get("custom_opsets", {})}
        torch.onnx.export(model, args, path, dynamo=False, **kw)
    return path


@functools.cache
def reuse_torchlib_registry() -> bool:
    """Lets torch's dynamo exporter build torchlib's op list once per process: it rebuilds it from
    source on every export (inspect.getsource of ~500 functions, about 0.9 s: most of a small
    model's export), though nothing it reads changes within a process. For processes that export
    many models (tests, the alignment's export). Returns False, changing nothing, where torch's
    internals differ."""
    try:
        from torch.onnx._internal.exporter import _registration

        apis = _registration.onnxscript_apis
        apis.get_torchlib_ops = functools.cache(apis.get_torchlib_ops)
    except (ImportError, AttributeError):
        return False
    return True


_register_torchscript_symbolics()
_register_out_exports()
