"""The ONNX Runtime layer: the composed graph without and with ORT's graph optimizations (and which
fusion fired), ORT's own fused op, and opforge_ort; each run through IOBinding into a preallocated
output (ORT's arena, no numpy copy) and through plain `run` (a fresh numpy output per call)."""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

import opforge_spec

from .torch_variants import COLS, EPS, INPUT_KEYS, OUTPUT_KEYS

OPSET = 17


def _model(nodes, inputs, initializers=(), opsets=(("", OPSET),), ir_version=8,
           outputs=("Y",), output_types=None) -> bytes:
    """A float32 graph; `output_types` (ONNX codes) where an output has a type of its own."""
    types = output_types or [TensorProto.FLOAT] * len(outputs)
    graph = helper.make_graph(
        nodes, "bench", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, code, None) for n, code in zip(outputs, types)],
        list(initializers))
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


def add_rms_norm_models(cols: int = COLS) -> dict:
    """The Add + RMSNorm graph as exported (the spec's decomposed form) and ORT's own fused op:
    SkipSimplifiedLayerNormalization's 4th output is the sum X + R (H)."""
    skip = helper.make_node("SkipSimplifiedLayerNormalization", ["X", "R", "W"], ["Y", "", "", "H"],
                            domain="com.microsoft", epsilon=EPS)
    return {
        "composed": decomposed_model("AddRMSNorm", cols),
        "SkipSimplifiedLayerNormalization (com.microsoft)": _model(
            [skip], _graph_inputs(opforge_spec.ADD_RMS_NORM, cols), [_weight(cols)],
            opsets=(("", OPSET), ("com.microsoft", 1)), outputs=("Y", "H")),
    }


def _weight(cols: int):
    return onnx.numpy_helper.from_array((np.random.default_rng(0).random(cols) + 0.5)
                                        .astype(np.float32), "W")


def _graph_inputs(spec: opforge_spec.OpSpec, cols: int) -> list:
    """(name, shape) of the op's graph inputs by the spec's shape rule: X and a residual R of its
    shape; a weight W is an initializer instead."""
    shape = ["n"] if spec.layout == "elementwise" else ["rows", spec.split * cols]
    return [(name, shape) for name in spec.inputs if name != "W"]


def _initializers(spec: opforge_spec.OpSpec, cols: int) -> list:
    return [_weight(cols)] if "W" in spec.inputs else []


def _output_types(spec: opforge_spec.OpSpec) -> list:
    """Each output's ONNX type for float32 X and the spec's default attributes (its dtype rule)."""
    return [opforge_spec.DTYPE_CODES[spec.output_dtype(name, "float32")] for name in spec.outputs]


def opforge_model(op: str, cols: int = COLS) -> bytes:
    """One opforge node with the spec's attribute defaults; X (and R) by the spec's shape rule,
    W (a per-column weight) an initializer, as in the composed graphs."""
    spec = opforge_spec.OPS[op]
    node = helper.make_node(op, list(spec.inputs), list(spec.outputs), domain=opforge_spec.DOMAIN,
                            **spec.defaults())
    return _model([node], _graph_inputs(spec, cols), _initializers(spec, cols),
                  opsets=(("", OPSET), (opforge_spec.DOMAIN, opforge_spec.DOMAIN_VERSION)),
                  outputs=spec.outputs, output_types=_output_types(spec))


class GraphEmitter:
    """The emitter the spec's decomposed forms are written against (OpSpec.decomposed), over
    onnx.helper: float32 constants as initializers, ReduceMean's axes by OPSET."""

    def __init__(self):
        self.nodes, self.initializers = [], []

    def _name(self, prefix: str) -> str:
        return f"{prefix}_{len(self.nodes) + len(self.initializers)}"

    def op(self, op_type, *inputs, **attributes):
        out = self._name(op_type)
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], **attributes))
        return out

    def _constant(self, array) -> str:
        name = self._name("const")
        self.initializers.append(onnx.numpy_helper.from_array(array, name))
        return name

    def scalar(self, value, like):
        return self._constant(np.array(value, np.float32))

    def ints(self, values):
        return self._constant(np.array(values, np.int64))

    def reduce_mean(self, x, axes):
        if OPSET >= 18:
            return self.op("ReduceMean", x, self.ints(axes), keepdims=1)
        return self.op("ReduceMean", x, axes=list(axes), keepdims=1)

    def reduce_max(self, x, axes):
        if OPSET >= 18:
            return self.op("ReduceMax", x, self.ints(axes), keepdims=1)
        return self.op("ReduceMax", x, axes=list(axes), keepdims=1)

    def tiny(self, like):
        return self.scalar(np.finfo(np.float32).tiny, like)

    def rename(self, old: str, new: str) -> None:
        for node in self.nodes:
            node.input[:] = [new if i == old else i for i in node.input]
            node.output[:] = [new if o == old else o for o in node.output]


def decomposed_model(op: str, cols: int = COLS) -> bytes:
    """The op in standard ONNX ops as torch's exporters write it (the spec's decomposed form,
    the spec's attribute defaults), its outputs named as the op's."""
    spec = opforge_spec.OPS[op]
    e = GraphEmitter()
    assert spec.decomposed is not None  # every op of the spec has a decomposed form
    returned = spec.decomposed(e, *spec.inputs, **spec.defaults())
    for tensor, name in zip(returned if len(spec.outputs) > 1 else (returned,), spec.outputs):
        e.rename(tensor, name)
    return _model(e.nodes, _graph_inputs(spec, cols), [*_initializers(spec, cols), *e.initializers],
                  outputs=spec.outputs, output_types=_output_types(spec))


# ORT's own forms of an op (composed graph, fused contrib ops) that opforge_ort competes with;
# any other op is timed against its decomposed form.
COMPETITORS = {"Swish": swish_models, "RMSNorm": rms_norm_models, "SwiGLU": swiglu_models,
               "AddRMSNorm": add_rms_norm_models}


def _their_models(op: str, cols: int) -> dict:
    return COMPETITORS[op](cols) if op in COMPETITORS else {"composed": decomposed_model(op, cols)}


MODELS = {op: (lambda cols=COLS, op=op: {**_their_models(op, cols),
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
    """{"prealloc": fn, "alloc": fn} for one session on the shared arrays (torch_variants.inputs);
    each returns the op's outputs (a list for an op of several)."""
    spec = opforge_spec.OPS[op]
    feeds = {name: inp[INPUT_KEYS[name]].numpy() for name in spec.inputs if name != "W"}
    outputs = [inp[OUTPUT_KEYS[name]].numpy() for name in spec.outputs]
    binding = sess.io_binding()
    for name, array in feeds.items():
        binding.bind_cpu_input(name, array)
    # An OrtValue over each output (binding the raw pointer makes ORT 1.32 abort in BFCArena on
    # the unfused RMSNorm graph at ORT_DISABLE_ALL).
    for name, array in zip(spec.outputs, outputs):
        binding.bind_ortvalue_output(name, ort.OrtValue.ortvalue_from_numpy(array))
    single = len(spec.outputs) == 1

    def prealloc():
        sess.run_with_iobinding(binding)
        return outputs[0] if single else outputs

    def alloc():
        got = sess.run(list(spec.outputs), feeds)
        return got[0] if single else got

    return {"prealloc": prealloc, "alloc": alloc}
