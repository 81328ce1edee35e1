"""Refusing what the library cannot see: the model's `opforge` import version.

ONNX Runtime creates one schema per custom op name, since version 1, and serves every import
version 1..1000 with it; kernels are matched against that schema's since version, never against
the model's import, and the C API of ORT 1.17 (the library's minimum) gives a kernel no way to read
the import. So a model importing opforge v2 would run the v1 kernels. The check is done here, on
the model, before the session exists.
"""
from __future__ import annotations

import os

from . import DOMAIN, DOMAIN_VERSION


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
    the one this library implements (DOMAIN_VERSION)."""
    proto = _load(model)
    nodes = opforge_nodes(proto)
    imported = {o.domain: o.version for o in proto.opset_import}.get(DOMAIN)
    if not nodes or imported == DOMAIN_VERSION:
        return
    node = nodes[0]
    got = "no opset_import for it" if imported is None else f"{DOMAIN} version {imported}"
    raise ModelError(f"opforge.{node.op_type}: domain version: expected {DOMAIN} version {DOMAIN_VERSION}, "
                     f"got {got} (node \"{node.name}\"; the model imports it for {len(nodes)} node(s))")


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
