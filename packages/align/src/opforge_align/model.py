"""Reading a model and describing its tensors: which node makes each, in which order (the node
order of a valid ONNX graph is topological), and the copies each runtime needs (every tensor
marked as an output; the float64 form of the reference run)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import opforge_spec as spec

from . import outputs

# Float element types the float64 reference run widens to DOUBLE.
NARROW_FLOATS = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16}


@dataclass(frozen=True)
class TensorInfo:
    """A tensor computed by a node of the main graph."""
    name: str
    node: str     # the producing node's name ("#<index>" when it has none)
    op: str       # "MatMul", or "opforge::Swish" for a custom domain
    order: int    # index of the producing node (topological)
    output: str = ""  # which of the node's outputs: "" when it has one; the spec's name (Y, H)
                      # for an opforge op, else "#<index>"


@dataclass
class Model:
    path: Path
    proto: onnx.ModelProto
    tensors: list = field(default_factory=list)      # TensorInfo, topological order
    elem_types: dict = field(default_factory=dict)   # tensor name -> TensorProto element type

    @property
    def graph(self) -> onnx.GraphProto:
        return self.proto.graph

    @property
    def outputs(self) -> list:
        return [o.name for o in self.graph.output]

    @property
    def inputs(self) -> list:
        """Graph inputs the caller feeds (initializers listed as inputs excluded)."""
        constants = {i.name for i in self.graph.initializer}
        return [i for i in self.graph.input if i.name not in constants]

    def has_domain(self, domain: str) -> bool:
        return any(n.domain == domain for n in _all_nodes(self.graph))

    def info(self, name: str) -> TensorInfo | None:
        return self._by_name.get(name)

    def __post_init__(self):
        self._by_name = {t.name: t for t in self.tensors}

    def compared_tensors(self, all_tensors: bool) -> list:
        """Names to compare, topological: every node output, or only the graph outputs."""
        if all_tensors:
            return [t.name for t in self.tensors]
        outputs = set(self.outputs)
        return [t.name for t in self.tensors if t.name in outputs]

    def uncompared_subgraphs(self) -> list:
        """One note per main-graph node holding subgraphs (If, Loop, Scan bodies): their tensors
        have no name in the main graph, so --all-tensors cannot compare them."""
        notes = []
        for i, node in enumerate(self.graph.node):
            bodies = _subgraphs(node)
            if not bodies:
                continue
            inner = [n for _, body in bodies for n in _all_nodes(body)]
            custom = sorted({_op_name(n) for n in inner if n.domain == spec.DOMAIN})
            notes.append(f"not compared: the tensors inside {_op_name(node)} node "
                         f"{node.name or f'#{i}'!r} ({', '.join(name for name, _ in bodies)}: "
                         f"{len(inner)} node(s)"
                         + (f", among them {', '.join(custom)}" if custom else "")
                         + "); only its outputs are")
        return notes

    def with_outputs(self, names: list) -> onnx.ModelProto:
        """A copy whose graph outputs are `names` (types from shape inference where known; ONNX
        Runtime and the reference evaluator take an output without one)."""
        copy = onnx.ModelProto()
        copy.CopyFrom(self.proto)
        existing = {o.name: o for o in copy.graph.output}
        known = {v.name: v for v in _inferred(copy).graph.value_info}
        del copy.graph.output[:]
        for name in names:
            info = existing.get(name) or known.get(name) or onnx.ValueInfoProto(name=name)
            copy.graph.output.append(info)
        return copy

    def node_inputs(self) -> dict:
        """tensor name -> names of the producing node's inputs (for the error budget)."""
        out = {}
        for node in self.graph.node:
            for name in node.output:
                out[name] = [i for i in node.input if i]
        return out


def load(path) -> Model:
    """The model at `path`, or AlignError naming the file and what is wrong with it."""
    from .errors import AlignError

    path = Path(path)
    if not path.is_file():
        raise AlignError(f"{path}: no such file")
    try:
        proto = onnx.load(str(path))
    except Exception as err:  # noqa: BLE001  protobuf's DecodeError and friends: an unreadable file
        raise AlignError(f"{path}: not a readable ONNX model ({type(err).__name__}: "
                         f"{_first_line(err)})") from None
    if not proto.graph.node:
        raise AlignError(f"{path}: not a readable ONNX model (no graph nodes)")
    _check_opforge_version(path, proto)
    tensors = [TensorInfo(name, node.name or f"#{i}", _op_name(node), i, outputs.role(node, k))
               for i, node in enumerate(proto.graph.node)
               for k, name in enumerate(node.output) if name]
    return Model(path, proto, tensors, _elem_types(proto))


def as_float64(proto: onnx.ModelProto) -> onnx.ModelProto:
    """A copy computing in float64 wherever the model uses float32/float16/bfloat16: declared
    types, initializers, constants and casts (subgraphs included)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    _widen_graph(copy.graph)
    return copy


def dtype_names(proto: onnx.ModelProto) -> dict:
    """tensor name -> the name of its dtype ("float32", "bfloat16", "int64", ...), for every tensor
    of the main graph whose type onnx infers - past opforge nodes too: onnx knows no schema of
    theirs and would stop there, so in an inference-only copy each output of an opforge node is
    a Reshape of its X to a shape nobody knows (X's type, no shape)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    nodes = [stand_in for node in copy.graph.node for stand_in in _typed_like_x(node)]
    del copy.graph.node[:]
    copy.graph.node.extend(nodes)
    copy.graph.input.append(helper.make_tensor_value_info(UNKNOWN_SHAPE, TensorProto.INT64, None))
    if not any(o.domain in ("", "ai.onnx") for o in copy.opset_import):
        copy.opset_import.append(helper.make_opsetid("", STAND_IN_OPSET))
    found = {name: _dtype_name(elem) for name, elem in _elem_types(copy).items()}
    return {name: dtype for name, dtype in found.items() if dtype and name != UNKNOWN_SHAPE}


# ----------------------------------------------------------------------------------------------

# The inference-only copy of dtype_names: the shape its stand-ins reshape to; the standard opset
# it imports when the model imports none (Reshape takes its shape as an input from opset 5).
UNKNOWN_SHAPE = "opforge_align::unknown_shape"
STAND_IN_OPSET = 13


def _typed_like_x(node) -> list:
    """`node`, or for an opforge node stand-ins per named output: its type (X's, or its own: a
    Cast of X's reshape to it), no shape."""
    if node.domain != spec.DOMAIN:
        return [node]
    if not node.input or not node.input[0]:
        return []  # no X: its outputs' types stay unknown
    stand_ins = []
    for role, name in zip(_output_roles(node), node.output):
        if not name:
            continue
        code = _own_dtype_code(node, role)
        if code is None:
            stand_ins.append(helper.make_node("Reshape", [node.input[0], UNKNOWN_SHAPE], [name]))
        else:
            shaped = f"{name}::{UNKNOWN_SHAPE}"
            stand_ins += [helper.make_node("Reshape", [node.input[0], UNKNOWN_SHAPE], [shaped]),
                          helper.make_node("Cast", [shaped], [name], to=code)]
    return stand_ins


def _output_roles(node) -> list:
    op = spec.OPS.get(node.op_type)
    return list(op.outputs) if op is not None else [""] * len(node.output)


def _own_dtype_code(node, role: str) -> int | None:
    """The ONNX element type of an opforge node's output `role` when it is not X's (a fixed dtype,
    or the one the node's enum attribute picks); None for X's or an op/value the spec lacks."""
    op = spec.OPS.get(node.op_type)
    if op is None or role not in op.output_dtypes:
        return None
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute if a.name in op.attributes}
    try:
        return spec.DTYPE_CODES[op.output_dtype(role, "", attrs)]
    except KeyError:  # a value the enum lacks: the node is refused when it runs
        return None


def _dtype_name(elem_type: int) -> str:
    """numpy's name of an ONNX element type ("bfloat16" whatever onnx stores it as), or ""."""
    if elem_type == TensorProto.BFLOAT16:
        return "bfloat16"
    try:
        return np.dtype(np_dtype(elem_type)).name
    except (KeyError, TypeError, ValueError):
        return ""


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else "no detail"


def _op_name(node) -> str:
    return f"{node.domain}::{node.op_type}" if node.domain not in ("", "ai.onnx") else node.op_type


def _check_opforge_version(path: Path, proto: onnx.ModelProto) -> None:
    from .errors import AlignError

    for opset in proto.opset_import:
        if opset.domain == spec.DOMAIN and opset.version != spec.DOMAIN_VERSION:
            raise AlignError(f"{path}: opset_import {spec.DOMAIN}: expected version "
                             f"{spec.DOMAIN_VERSION}, got {opset.version}")


def _inferred(proto: onnx.ModelProto) -> onnx.ModelProto:
    try:
        return onnx.shape_inference.infer_shapes(proto)
    except Exception:  # noqa: BLE001  a graph shape inference cannot follow: no types, no harm
        return proto


def _elem_types(proto: onnx.ModelProto) -> dict:
    graph = _inferred(proto).graph
    types = {}
    for info in [*graph.input, *graph.value_info, *graph.output]:
        if info.type.HasField("tensor_type") and info.type.tensor_type.elem_type:
            types[info.name] = info.type.tensor_type.elem_type
    for init in graph.initializer:
        types[init.name] = init.data_type
    return types


def _subgraphs(node) -> list:
    """(attribute name, graph) of each subgraph a node holds."""
    found = []
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            found.append((attr.name, attr.g))
        found += [(f"{attr.name}[{k}]", g) for k, g in enumerate(attr.graphs)]
    return found


def _all_nodes(graph):
    for node in graph.node:
        yield node
        for _, sub in _subgraphs(node):
            yield from _all_nodes(sub)


def _widen_graph(graph: onnx.GraphProto) -> None:
    for info in [*graph.input, *graph.output, *graph.value_info]:
        if info.type.HasField("tensor_type") and info.type.tensor_type.elem_type in NARROW_FLOATS:
            info.type.tensor_type.elem_type = TensorProto.DOUBLE
    for i, init in enumerate(graph.initializer):
        if init.data_type in NARROW_FLOATS:
            graph.initializer[i].CopyFrom(_widen_tensor(init))
    for node in graph.node:
        _widen_node(node)


def _widen_tensor(tensor: onnx.TensorProto) -> onnx.TensorProto:
    array = numpy_helper.to_array(tensor).astype("float64")
    return numpy_helper.from_array(array, tensor.name)


def _widen_node(node: onnx.NodeProto) -> None:
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.TENSOR and attr.t.data_type in NARROW_FLOATS:
            attr.t.CopyFrom(_widen_tensor(attr.t))
        elif attr.type == onnx.AttributeProto.INT and attr.name in ("to", "dtype") \
                and attr.i in NARROW_FLOATS:
            attr.i = TensorProto.DOUBLE
        elif attr.type == onnx.AttributeProto.GRAPH:
            _widen_graph(attr.g)
        elif attr.type == onnx.AttributeProto.GRAPHS:
            for sub in attr.graphs:
                _widen_graph(sub)


def np_dtype(elem_type: int):
    return helper.tensor_dtype_to_np_dtype(elem_type)
