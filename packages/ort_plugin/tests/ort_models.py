"""Hand-written ONNX models (onnx.helper, no torch) around the opforge ops, and sessions for them."""
from __future__ import annotations

import os

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import opforge_ort
import opforge_spec as spec

IR_VERSION = 8  # ORT 1.17 rejects the IR versions newer onnx writes by default
ELEM = {"float32": TensorProto.FLOAT, "float64": TensorProto.DOUBLE, "bfloat16": TensorProto.BFLOAT16,
        "float16": TensorProto.FLOAT16, "int32": TensorProto.INT32, "int64": TensorProto.INT64,
        "int8": TensorProto.INT8, "float8_e4m3fn": TensorProto.FLOAT8E4M3FN}
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


def attribute_value(op: str, name: str, value):
    """An attribute as the spec defines it: INT for an int or enum attribute given an integral
    value, FLOAT otherwise (a non-integral value for an INT attribute stays FLOAT: refused)."""
    attr = spec.OPS[op].attributes.get(name) if op in spec.OPS else None
    if attr is not None and attr.kind != "float" and float(value).is_integer():
        return int(value)
    return float(value)


def opforge_node(op: str, inputs, outputs, name: str, **attrs):
    attrs = {k: attribute_value(op, k, v) for k, v in attrs.items()}
    return helper.make_node(op, list(inputs), list(outputs), domain="opforge", name=name, **attrs)


def output_dtype(op: str, output: str, x_dtype: str, attrs: dict | None = None) -> str:
    """An output's dtype name: X's, its fixed one, or the one its enum attribute picks."""
    return spec.OPS[op].output_dtype(output, x_dtype, attrs)


def output_infos(op: str, x_dtype: str, attrs: dict | None = None, names=None) -> list:
    """The value_infos of an op node's outputs (dynamic rank), each of its own dtype."""
    names = spec.OPS[op].outputs if names is None else names
    return [value_info(name, output_dtype(op, output, x_dtype, attrs), None)
            for name, output in zip(names, spec.OPS[op].outputs)]


def served(op: str, attrs: dict) -> bool:
    """Whether opforge_ort serves these attributes: an output whose dtype an attribute picks is
    registered with the attribute's default (ORT's custom-op API fixes an output's type)."""
    spec_op = spec.OPS[op]
    return all(spec_op.output_dtype(o, "", attrs) == spec_op.output_dtype(o, "", {})
               for o in spec_op.outputs if spec_op.quantized_output(o))


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


def input_rank(name: str, rank: int, w_rank: int = 1) -> int:
    """An op input's rank when X has `rank`: W (a per-column weight) has its own, R has X's."""
    return w_rank if name == "W" else rank


def single_op_model(op: str, dtype: str, rank: int, w_rank: int = 1, w_as_initializer=None, w_dtype=None,
                    **attrs) -> bytes:
    """One opforge node with the spec's inputs and outputs (all dims dynamic); bfloat16 is fed as
    float32 and cast on both sides (numpy has no bfloat16).
    `w_as_initializer`: an array to bake in as W instead of a graph input.
    `w_dtype`: W's dtype when it is not X's (a mixed-dtype call), fed as is (float32, float64)."""
    spec_op = spec.OPS[op]
    storage = "float32" if dtype == "bfloat16" else dtype
    nodes, inputs, inits, op_inputs = [], [], [], []
    for name in spec_op.inputs:
        own = name == "W" and w_dtype not in (None, dtype)  # W of its own dtype: no cast
        stored = w_dtype if own else storage
        if name == "W" and w_as_initializer is not None:
            inits.append(initializer(name, np.asarray(w_as_initializer).astype(stored)))
        else:
            inputs.append(value_info(name, stored, input_rank(name, rank, w_rank), prefix=name.lower()))
        op_inputs.append(_cast(nodes, name, TensorProto.BFLOAT16) if dtype == "bfloat16" and not own else name)
    cast_back = [name for name in spec_op.outputs if dtype == "bfloat16" and name not in spec_op.output_dtypes]
    op_outputs = [f"{name}c" if name in cast_back else name for name in spec_op.outputs]
    nodes.append(opforge_node(op, op_inputs, op_outputs, name=f"{op.lower()}_node", **attrs))
    for name in cast_back:
        nodes.append(helper.make_node("Cast", [f"{name}c"], [name], to=TensorProto.FLOAT))
    return make_model(nodes, inputs, output_infos(op, storage, attrs), inits)


def _cast(nodes: list, name: str, to: int) -> str:
    nodes.append(helper.make_node("Cast", [name], [f"{name}c"], to=to))
    return f"{name}c"


def result(op: str, outputs: list):
    """What session.run gave, as the spec's reference returns it: Y, or a tuple (Y, H, ...)."""
    return tuple(outputs) if len(spec.OPS[op].outputs) > 1 else outputs[0]


def output_shapes(op: str, x_shape) -> list:
    """Every output's shape by its rule: the op's (Y), X's (H), X's with the last dim 1 (a per-row scale)."""
    spec_op = spec.OPS[op]
    return [tuple(spec_op.output_shape_of(name, x_shape)) for name in spec_op.outputs]


def random_inputs(op: str, rng: np.random.Generator, lead_shape: tuple, d: int, dtype=np.float32) -> dict:
    """Feeds for `op` by input name: X (and R) of shape lead_shape + (d * split,), W of length d * split."""
    spec_op = spec.OPS[op]
    x_shape = tuple(lead_shape) + (d * spec_op.split,)
    return {name: (rng.uniform(0.5, 1.5, x_shape[-1]) if name == "W" else rng.standard_normal(x_shape)).astype(dtype)
            for name in spec_op.inputs}


# ---- the residual stream of a LLaMA decoder: AddRMSNorm's H feeds the next AddRMSNorm --------------

STREAM_EPS, SUBLAYER_SCALE = 1e-5, 0.75


def residual_stream_model(rank: int, dtype: str = "float32", opset: int = 17) -> bytes:
    """(Y1, H1) = AddRMSNorm(X, R, W1); a sublayer stand-in D = SUBLAYER_SCALE * Swish(Y1);
    (Y2, H2) = AddRMSNorm(D, H1, W2). All dims dynamic; Y1, H1, Y2, H2 are the graph's outputs."""
    nodes = [
        opforge_node("AddRMSNorm", ["X", "R", "W1"], ["Y1", "H1"], name="norm1", epsilon=STREAM_EPS),
        opforge_node("Swish", ["Y1"], ["S"], name="sublayer_act"),
        helper.make_node("Mul", ["S", "scale"], ["D"], name="sublayer"),
        opforge_node("AddRMSNorm", ["D", "H1", "W2"], ["Y2", "H2"], name="norm2", epsilon=STREAM_EPS),
    ]
    inputs = [value_info("X", dtype, rank), value_info("R", dtype, rank),
              value_info("W1", dtype, 1, prefix="c"), value_info("W2", dtype, 1, prefix="c")]
    outputs = [value_info(name, dtype, rank) for name in ("Y1", "H1", "Y2", "H2")]
    scale = initializer("scale", np.array(SUBLAYER_SCALE, dtype))
    return make_model(nodes, inputs, outputs, [scale], opset=opset)


def residual_stream_reference(x, r, w1, w2) -> tuple:
    """((Y1, H1), (Y2, H2)) in float64, from the spec's references."""
    first = spec.ADD_RMS_NORM.reference(x, r, w1, epsilon=STREAM_EPS)
    d = SUBLAYER_SCALE * spec.SWISH.reference(first[0])
    return first, spec.ADD_RMS_NORM.reference(d, first[1], w2, epsilon=STREAM_EPS)


def check_residual_stream(outputs, feeds: dict, dtype: str, label: str) -> None:
    y1, h1, y2, h2 = outputs
    first, second = residual_stream_reference(*(feeds[n] for n in ("X", "R", "W1", "W2")))
    spec.ADD_RMS_NORM.check_close((y1, h1), first, dtype, (feeds["X"],), f"{label} norm1")
    spec.ADD_RMS_NORM.check_close((y2, h2), second, dtype, (feeds["X"],), f"{label} norm2")
