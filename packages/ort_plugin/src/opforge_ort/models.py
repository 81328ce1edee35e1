"""Refusing what the library cannot see: the model's `opforge` import version, and an output dtype
an attribute picks that ONNX Runtime cannot give the library.

ONNX Runtime creates one schema per custom op name, since version 1, and serves every import
version 1..1000 with it; kernels are matched against that schema's since version, never against
the model's import, and the C API of ORT 1.17 (the library's minimum) gives a kernel no way to read
the import. So a model importing opforge v2 would run the v1 kernels. The check is done here, on
the model, before the session exists.
"""
from __future__ import annotations

import os

from . import DOMAIN, DOMAIN_VERSION, _spec


class ModelError(ValueError):
    """A model opforge_ort refuses; str() is opforge's canonical message with the node name."""


def _load(model):
    """An onnx.ModelProto from a path, serialized bytes or a ModelProto (external data not loaded)."""
    import onnx

    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray)):
        return onnx.load_from_string(bytes(model))
    return onnx.load(os.fspath(model), load_external_data=False)


def _graphs(graph):
    """graph and every subgraph (If/Loop/Scan bodies) in it."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                yield from _graphs(sub)


def opforge_nodes(model) -> list:
    return [n for g in _graphs(model.graph) for n in g.node if n.domain == DOMAIN]


def check_model(model) -> None:
    """Raise ModelError when the model's opforge nodes would run under another domain version than
    the one this library implements (DOMAIN_VERSION), or when a node's attribute picks an output
    dtype the library is not registered with (check_output_dtypes)."""
    proto = _load(model)
    nodes = opforge_nodes(proto)
    for node in nodes:
        check_output_dtypes(node)
    imported = {o.domain: o.version for o in proto.opset_import}.get(DOMAIN)
    if not nodes or imported == DOMAIN_VERSION:
        return
    node = nodes[0]
    got = "no opset_import for it" if imported is None else f"{DOMAIN} version {imported}"
    raise ModelError(f"opforge.{node.op_type}: domain version: expected {DOMAIN} version {DOMAIN_VERSION}, "
                     f"got {got} (node \"{node.name}\"; the model imports it for {len(nodes)} node(s))")


def _dtype_attributes(op: str) -> dict:
    """op's enum attributes that pick an output's dtype: attribute -> (output, default, choices)."""
    choices = _spec.ENUM_CHOICES.get(op, {})
    defaults = dict(_spec.ATTRIBUTES.get(op, ()))
    return {dtype: (output, int(defaults[dtype]), choices[dtype])
            for output, dtype, _shape in _spec.OUTPUTS.get(op, ()) if dtype in choices}


def check_output_dtypes(node) -> None:
    """ONNX Runtime's custom-op API (1.17 to 1.32) fixes each output's element type when the op is
    registered and infers a node's output types from its inputs alone (the shape-inference hook
    sets shapes only), so an output whose dtype an attribute picks is registered with the
    attribute's default; a node picking another is refused here, naming it (ORT's own words are a
    Type Error on the output)."""
    for attr_name, (output, default, choices) in _dtype_attributes(node.op_type).items():
        value = next((a.i for a in node.attribute if a.name == attr_name), default)
        if value == default:
            continue
        names = {v: k for k, v in choices.items()}
        raise ModelError(
            f"opforge.{node.op_type}: {attr_name}: expected {default} ({names[default]}) in ONNX Runtime: its "
            f"custom-op API fixes output {output}'s element type when the op is registered, so opforge_ort "
            f"serves {names[default]} only, got {value} ({names.get(value, 'not a choice')}) (node \"{node.name}\")")


def inference_session(model, options=None, providers=None, **kwargs):
    """onnxruntime.InferenceSession for `model` (path, bytes or ModelProto) with the opforge domain
    registered in `options`, after check_model: what ONNX Runtime cannot refuse is refused here."""
    import onnxruntime

    from . import session_options

    check_model(model)
    if hasattr(model, "SerializeToString"):  # an onnx.ModelProto
        model = model.SerializeToString()
    elif isinstance(model, bytearray):
        model = bytes(model)
    return onnxruntime.InferenceSession(model, session_options(options),
                                        providers=providers or ["CPUExecutionProvider"], **kwargs)
