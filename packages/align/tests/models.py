"""Models built with onnx.helper for the tests: standard ops mixed with opforge nodes."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSETS = [helper.make_opsetid("", 18), helper.make_opsetid("opforge", 1)]


def mixed(path, *, dtype=TensorProto.FLOAT, opforge_version: int = 1, opforge: bool = True) -> list:
    """x -> MatMul -> Add -> opforge::Swish -> opforge::RMSNorm -> Tanh -> MatMul -> Softmax -> y
    (`opforge=False`: Sigmoid and Mul in place of the opforge ops). Returns the intermediate
    tensor names, in order."""
    rng = np.random.default_rng(1)
    np_type = helper.tensor_dtype_to_np_dtype(dtype)

    def const(name, array):
        return numpy_helper.from_array(np.asarray(array, np_type), name)

    inits = [const("w1", rng.standard_normal((16, 32)) / 4), const("b1", rng.standard_normal(32)),
             const("g", rng.uniform(0.5, 1.5, 32)), const("w2", rng.standard_normal((32, 8)) / 5)]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["/l1/mm"], name="l1_mm"),
        helper.make_node("Add", ["/l1/mm", "b1"], ["/l1/add"], name="l1_add"),
        helper.make_node("Swish", ["/l1/add"], ["/l1/swish"], domain="opforge", beta=1.5,
                         name="l1_swish"),
        helper.make_node("RMSNorm", ["/l1/swish", "g"], ["/l1/norm"], domain="opforge",
                         epsilon=1e-5, name="l1_norm"),
        helper.make_node("Tanh", ["/l1/norm"], ["/l1/tanh"], name="l1_tanh"),
        helper.make_node("MatMul", ["/l1/tanh", "w2"], ["/l2/mm"], name="l2_mm"),
        helper.make_node("Softmax", ["/l2/mm"], ["y"], axis=-1, name="softmax"),
    ]
    if not opforge:
        nodes[2] = helper.make_node("Sigmoid", ["/l1/add"], ["/l1/swish"], name="l1_sigmoid")
        nodes[3] = helper.make_node("Mul", ["/l1/swish", "g"], ["/l1/norm"], name="l1_mul")
    graph = helper.make_graph(nodes, "mixed", [helper.make_tensor_value_info("x", dtype, ["batch", 16])],
                              [helper.make_tensor_value_info("y", dtype, ["batch", 8])], inits)
    opsets = [OPSETS[0], helper.make_opsetid("opforge", opforge_version)]
    onnx.save(helper.make_model(graph, opset_imports=opsets), str(path))
    return [n.output[0] for n in nodes]


def chain(path, n_nodes: int, width: int = 64) -> None:
    """A deep model of `n_nodes` nodes cycling through MatMul, Add, opforge::Swish, Mul,
    opforge::RMSNorm, Tanh (a few hundred nodes: the speed check)."""
    rng = np.random.default_rng(2)
    w = numpy_helper.from_array((rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(width).astype(np.float32) * 0.1, "b")
    g = numpy_helper.from_array(rng.uniform(0.5, 1.5, width).astype(np.float32), "g")
    kinds = [("MatMul", ["w"], {}, ""), ("Add", ["b"], {}, ""), ("Swish", [], {"beta": 1.0}, "opforge"),
             ("Mul", ["g"], {}, ""), ("RMSNorm", ["g"], {"epsilon": 1e-6}, "opforge"),
             ("Tanh", [], {}, "")]
    nodes, previous = [], "x"
    for i in range(n_nodes):
        op, extra, attrs, domain = kinds[i % len(kinds)]
        name = "y" if i == n_nodes - 1 else f"t{i}"
        nodes.append(helper.make_node(op, [previous, *extra], [name], name=f"n{i}", domain=domain,
                                      **attrs))
        previous = name
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, width])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w, b, g])
    onnx.save(helper.make_model(graph, opset_imports=OPSETS), str(path))


def residual_stream(path, *, width: int = 16) -> dict:
    """Two decoder steps sharing one residual stream: the first AddRMSNorm's H is the residual of
    the second. x, r -> b1_norm (y1, h1) -> MatMul -> b2_norm(mm, h1) -> (y, h). Returns
    {tensor: (node, output)} of the AddRMSNorm outputs."""
    rng = np.random.default_rng(3)

    def const(name, array):
        return numpy_helper.from_array(np.asarray(array, np.float32), name)

    inits = [const("g1", rng.uniform(0.5, 1.5, width)), const("g2", rng.uniform(0.5, 1.5, width)),
             const("wm", rng.standard_normal((width, width)) / np.sqrt(width))]
    nodes = [
        helper.make_node("AddRMSNorm", ["x", "r", "g1"], ["/b1/y", "/b1/h"], domain="opforge",
                         epsilon=1e-5, name="b1_norm"),
        helper.make_node("MatMul", ["/b1/y", "wm"], ["/b1/mm"], name="b1_mm"),
        helper.make_node("AddRMSNorm", ["/b1/mm", "/b1/h", "g2"], ["y", "h"], domain="opforge",
                         name="b2_norm"),
    ]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", width]) for n in ("x", "r")]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", width]) for n in ("y", "h")]
    graph = helper.make_graph(nodes, "residual_stream", io, outs, inits)
    onnx.save(helper.make_model(graph, opset_imports=OPSETS), str(path))
    return {"/b1/y": ("b1_norm", "Y"), "/b1/h": ("b1_norm", "H"), "y": ("b2_norm", "Y"),
            "h": ("b2_norm", "H")}


def tensors_by_name(report: dict) -> dict:
    """report.json's `tensors` (a list in topological order) keyed by each entry's name."""
    return {entry["name"]: entry for entry in report["tensors"]}
