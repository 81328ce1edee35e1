"""The ONNX Runtime layer: the composed graph without and with ORT's graph optimizations (and which
fusion fired), ORT's own fused op, and opforge_ort; each run through IOBinding into a preallocated
output (ORT's arena, no numpy copy) and through plain `run` (a fresh numpy output per call)."""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import opforge_spec
from onnx import TensorProto, helper

from .torch_variants import COLS, EPS

OPSET = 17


def _model(nodes, inputs, initializers=(), opsets=(("", OPSET),), ir_version=8) -> bytes:
    graph = helper.make_graph(
        nodes, "bench", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    model.ir_version = ir_version
    return model.SerializeToString()


def swish_models(cols: int = COLS) -> dict:
    x = [("X", ["n"])]
    return {
        "composed": _model([helper.make_node("Sigmoid", ["X"], ["S"]),
                            helper.make_node("Mul", ["X", "S"], ["Y"])], x),
        "QuickGelu (com.microsoft)": _model(
            [helper.make_node("QuickGelu", ["X"], ["Y"], domain="com.microsoft", alpha=1.0)], x,
            opsets=(("", OPSET), ("com.microsoft", 1))),
    }


def rms_norm_models(cols: int = COLS) -> dict:
    x = [("X", ["rows", cols])]
    w = _weight(cols)
    two = onnx.numpy_helper.from_array(np.array(2.0, np.float32), "two")
    eps = onnx.numpy_helper.from_array(np.array(EPS, np.float32), "eps")
    composed = [helper.make_node("Pow", ["X", "two"], ["sq"]),
                helper.make_node("ReduceMean", ["sq"], ["ms"], axes=[-1], keepdims=1),
                helper.make_node("Add", ["ms", "eps"], ["den"]),
                helper.make_node("Sqrt", ["den"], ["rms"]),
                helper.make_node("Div", ["X", "rms"], ["xn"]),
                helper.make_node("Mul", ["xn", "W"], ["Y"])]
    return {
        "composed": _model(composed, x, [w, two, eps]),
        "SimplifiedLayerNormalization": _model(
            [helper.make_node("SimplifiedLayerNormalization", ["X", "W"], ["Y"], axis=-1,
                              epsilon=EPS)], x, [w]),
        "RMSNormalization (opset 23)": _model(
            [helper.make_node("RMSNormalization", ["X", "W"], ["Y"], axis=-1, epsilon=EPS)], x,
            [w], opsets=(("", 23),), ir_version=11),
    }


def swiglu_models(cols: int = COLS) -> dict:
    x = [("X", ["rows", 2 * cols])]
    composed = [helper.make_node("Split", ["X"], ["A", "B"], axis=-1),  # two equal halves
                helper.make_node("Sigmoid", ["A"], ["S"]),
                helper.make_node("Mul", ["A", "S"], ["G"]),
                helper.make_node("Mul", ["G", "B"], ["Y"])]
    return {
        "composed": _model(composed, x),
    }


def _weight(cols: int):
    return onnx.numpy_helper.from_array((np.random.default_rng(0).random(cols) + 0.5)
                                        .astype(np.float32), "W")


def opforge_model(op: str, cols: int = COLS) -> bytes:
    """One opforge node with the spec's attribute defaults; X by the spec's shape rule, W (a
    per-column weight) an initializer, as in the composed graphs."""
    spec = opforge_spec.OPS[op]
    x = [("X", ["n"] if spec.layout == "elementwise" else ["rows", spec.split * cols])]
    node = helper.make_node(op, list(spec.inputs), ["Y"], domain=opforge_spec.DOMAIN, **spec.defaults())
    return _model([node], x, [_weight(cols)] if len(spec.inputs) == 2 else [],
                  opsets=(("", OPSET), (opforge_spec.DOMAIN, opforge_spec.DOMAIN_VERSION)))


# ORT's own forms of an op (composed graph, fused contrib ops) that opforge_ort competes with.
COMPETITORS = {"Swish": swish_models, "RMSNorm": rms_norm_models, "SwiGLU": swiglu_models}
MODELS = {op: (lambda cols=COLS, op=op: {**(COMPETITORS[op](cols) if op in COMPETITORS else {}),
                                        "opforge_ort": opforge_model(op, cols)})
          for op in opforge_spec.OPS}


def library() -> str | None:
    try:
        import opforge_ort
    except ImportError:
        return None
    return opforge_ort.library_path()


def _options(level, threads: int, lib: str | None, optimized_path: str | None = None):
    options = ort.SessionOptions()
    options.graph_optimization_level = level
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    if optimized_path:
        options.optimized_model_filepath = optimized_path
        options.log_severity_level = 3  # else a warning per session that the file is host-specific
    if lib:
        options.register_custom_ops_library(lib)
    return options


def sessions(op: str, threads: int) -> tuple:
    """({variant name: session}, {variant name: why not}, {variant name: graph after ORT's
    optimizations})."""
    lib, made, missing, graphs = library(), {}, {}, {}
    levels = ort.GraphOptimizationLevel
    for name, model in MODELS[op]().items():
        if name == "opforge_ort" and not lib:
            missing[name] = "opforge_ort is not installed"
            continue
        wanted = [("composed, no fusion (ORT_DISABLE_ALL)", levels.ORT_DISABLE_ALL),
                  ("composed (ORT_ENABLE_ALL)", levels.ORT_ENABLE_ALL)] if name == "composed" else \
                 [(name, levels.ORT_ENABLE_ALL)]
        for label, level in wanted:
            try:
                made[label] = ort.InferenceSession(model, _options(level, threads, lib),
                                                   providers=["CPUExecutionProvider"])
                graphs[label] = optimized_graph(model, level, lib)
            except Exception as err:  # noqa: BLE001  e.g. no RMSNormalization in this ORT: report
                missing[label] = f"{type(err).__name__}: {str(err).splitlines()[0][:300]}"
    return made, missing, graphs


def optimized_graph(model: bytes, level, lib) -> list:
    """The node types ORT runs after its graph optimizations (to name the fusion that fired)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "optimized.onnx")
        ort.InferenceSession(model, _options(level, 1, lib, path), providers=["CPUExecutionProvider"])
        return [f"{n.domain + '::' if n.domain else ''}{n.op_type}" for n in onnx.load(path).graph.node]


def runners(sess, inp: dict, op: str) -> dict:
    """{"prealloc": fn, "alloc": fn} for one session on the shared arrays (torch_variants.inputs)."""
    x, y = inp["x"].numpy(), inp["y"].numpy()
    binding = sess.io_binding()
    binding.bind_cpu_input("X", x)
    # An OrtValue over y (binding the raw pointer makes ORT 1.32 abort in BFCArena on the
    # unfused RMSNorm graph at ORT_DISABLE_ALL).
    binding.bind_ortvalue_output("Y", ort.OrtValue.ortvalue_from_numpy(y))
    return {"prealloc": lambda: sess.run_with_iobinding(binding) or y,
            "alloc": lambda: sess.run(["Y"], {"X": x})[0]}
