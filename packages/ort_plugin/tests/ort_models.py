"""Hand-written ONNX models (onnx.helper, no torch) around the opforge ops, and sessions for them."""
from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import opforge_ort

IR_VERSION = 8  # ORT 1.17 rejects the IR versions newer onnx writes by default
ELEM = {"float32": TensorProto.FLOAT, "float64": TensorProto.DOUBLE, "bfloat16": TensorProto.BFLOAT16,
        "float16": TensorProto.FLOAT16, "int32": TensorProto.INT32, "int64": TensorProto.INT64}
ORT_VERSION = tuple(int(p) for p in ort.__version__.split(".")[:2])
MIN_ORT = (1, 17)  # the library's ORT API floor (cmake/inputs.cmake): it refuses older runtimes


def opsets() -> list:
    """Standard-domain opsets to build models for: OPFORGE_ONNX_OPSETS="13,17" or a default set
    that the installed runtime supports (ORT 1.17 reads opset <= 20)."""
    if os.environ.get("OPFORGE_ONNX_OPSETS"):
        return [int(v) for v in os.environ["OPFORGE_ONNX_OPSETS"].split(",")]
    return [13, 17, 20]


def value_info(name: str, dtype: str, rank: int | None, prefix: str = "d"):
    """A tensor input/output whose dims are all symbolic (dynamic)."""
    shape = None if rank is None else [f"{prefix}{i}" for i in range(rank)]
    return helper.make_tensor_value_info(name, ELEM[dtype], shape)


def opforge_node(op: str, inputs, outputs, name: str, **attrs):
    attrs = {k: float(v) for k, v in attrs.items()}  # ONNX FLOAT attributes, as the spec defines them
    return helper.make_node(op, list(inputs), list(outputs), domain="opforge", name=name, **attrs)


def make_model(nodes, inputs, outputs, initializers=(), opset: int = 17, opforge_version: int | None = 1,
               domain: str = "opforge") -> bytes:
    graph = helper.make_graph(list(nodes), "opforge_test", list(inputs), list(outputs), list(initializers))
    imports = [helper.make_opsetid("", opset)]
    if opforge_version is not None:
        imports.append(helper.make_opsetid(domain, opforge_version))
    model = helper.make_model(graph, opset_imports=imports, ir_version=IR_VERSION)
    return model.SerializeToString()


def initializer(name: str, array: np.ndarray):
    return numpy_helper.from_array(np.asarray(array), name)


def session(model: bytes, threads: int | None = None) -> ort.InferenceSession:
    options = opforge_ort.session_options()
    options.log_severity_level = 4  # failures are asserted on the exception; keep the log quiet
    if threads is not None:
        options.intra_op_num_threads = threads
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def single_op_model(op: str, dtype: str, rank: int, w_rank: int = 1, w_as_initializer=None, **attrs) -> bytes:
    """One opforge node; bfloat16 is fed as float32 and cast on both sides (numpy has no bfloat16).
    `w_as_initializer`: an array to bake in as W instead of a graph input."""
    storage = "float32" if dtype == "bfloat16" else dtype
    nodes, inputs, inits = [], [value_info("X", storage, rank)], []
    x, w = "X", "W"
    if dtype == "bfloat16":
        nodes.append(helper.make_node("Cast", ["X"], ["Xc"], to=TensorProto.BFLOAT16))
        x = "Xc"
    op_inputs = [x]
    if op == "RMSNorm":
        if w_as_initializer is not None:
            inits.append(initializer("W", w_as_initializer.astype(storage)))
        else:
            inputs.append(value_info("W", storage, w_rank, prefix="c"))
        if dtype == "bfloat16":
            nodes.append(helper.make_node("Cast", ["W"], ["Wc"], to=TensorProto.BFLOAT16))
            w = "Wc"
        op_inputs.append(w)
    y = "Yc" if dtype == "bfloat16" else "Y"
    nodes.append(opforge_node(op, op_inputs, [y], name=f"{op.lower()}_node", **attrs))
    if dtype == "bfloat16":
        nodes.append(helper.make_node("Cast", ["Yc"], ["Y"], to=TensorProto.FLOAT))
    return make_model(nodes, inputs, [value_info("Y", storage, None)], inits)
