"""TensorRT itself: ONNX models with opforge nodes, built into engines through the ONNX parser's
plugin fallback, run, compared with opforge_spec's references; and the plugin's refusal of a wrong W
at build time. Needs the `tensorrt` package (10.x) and a GPU: skipped otherwise, with the reason.
Device buffers come from libcudart through ctypes (no torch, no cuda-python needed)."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

import opforge_trt

spec = pytest.importorskip("opforge_spec", reason="pip install ./kernels (opforge_spec)")
onnx = pytest.importorskip("onnx", reason="onnx not installed (pip install onnx)")
from onnx import TensorProto, helper  # noqa: E402


@pytest.fixture(scope="module")
def trt():
    try:
        import tensorrt
    except (ImportError, OSError) as exc:  # absent, or the bindings without libnvinfer
        pytest.skip(f"no GPU: no TensorRT runtime here (`import tensorrt` failed: {str(exc).splitlines()[0]})")
    cudart = _cudart()
    count = ctypes.c_int(0)
    if cudart.cudaGetDeviceCount(ctypes.byref(count)) != 0 or count.value < 1:
        pytest.skip("no GPU: cudaGetDeviceCount found no usable device")
    tensorrt.get_plugin_registry().load_library(opforge_trt.library_path())  # before any parse
    return tensorrt


def _cudart():
    major = opforge_trt.build_info()["cuda_version"].split(".")[0]
    return ctypes.CDLL(f"libcudart.so.{major}")


def _Logger(trt):
    """A TensorRT logger that keeps what it is told (the plugins log through it via setLoggerFinder)."""
    class Capture(trt.ILogger):
        def __init__(self):
            trt.ILogger.__init__(self)
            self.lines = []

        def log(self, severity, msg):
            self.lines.append(msg)

    return Capture()


ONNX_TYPES = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16}
# an output's own dtype (RMSNormQuant's Q, int8 or float8; its scale, float32): the network is
# strongly typed, so TensorRT takes the plugin's types and needs no dynamic range for the int8 Q
OUTPUT_TYPES = {**ONNX_TYPES, "int8": TensorProto.INT8, "float8_e4m3fn": TensorProto.FLOAT8E4M3FN}


def _attribute(op, name: str, value):
    """As the exporters write it: INT for an int or enum attribute, FLOAT otherwise."""
    return int(value) if op.attributes[name].kind != "float" else float(value)


def _input_dtype(name: str, dtype: str, w_dtype) -> str:
    return w_dtype if name == "W" and w_dtype else dtype


def _model(op, dtype: str, inputs: list, w_dtype=None, **attrs) -> bytes:
    """One opforge node with the op's inputs (X[, R][, W], of these arrays' shapes; W of w_dtype if
    given) and outputs (each of its dtype, shapes left to TensorRT's inference) as the graph's."""
    node = helper.make_node(op.name, list(op.inputs), list(op.outputs), domain="opforge", name=f"{op.name}_0",
                            **{k: _attribute(op, k, v) for k, v in attrs.items()})
    graph = helper.make_graph(
        [node], f"{op.name}_graph",
        [helper.make_tensor_value_info(n, ONNX_TYPES[_input_dtype(n, dtype, w_dtype)], list(np.shape(a)))
         for n, a in zip(op.inputs, inputs)],
        [helper.make_tensor_value_info(n, OUTPUT_TYPES[op.output_dtype(n, dtype, attrs)], None) for n in op.outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("opforge", 1)])
    return model.SerializeToString()


def _engine(trt, model: bytes, logger):
    builder = trt.Builder(logger)
    network = builder.create_network(1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED))
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(model):
        return None, [str(parser.get_error(i)) for i in range(parser.num_errors)]
    plan = builder.build_serialized_network(network, builder.create_builder_config())
    if plan is None:
        return None, logger.lines
    # Deserializing recreates the plugins from their serialized fields (the round trip of a plan).
    return trt.Runtime(logger).deserialize_cuda_engine(plan), []


def _output_shapes(op, x_shape) -> list:
    """Each output's shape by its rule (Y the op's, H X's, a per-row scale X's with the last dim 1)."""
    return [tuple(op.output_shape_of(name, x_shape)) for name in op.outputs]


def _numpy_dtype(name: str):
    if name == "float8_e4m3fn":  # numpy has none: ml_dtypes' (onnx depends on it)
        import ml_dtypes

        return ml_dtypes.float8_e4m3fn
    return np.dtype(name)


def _execute(trt, engine, op, inputs: list, dtype, attrs=None, w_dtype=None):
    """The op's outputs (one array, or a tuple Y, H) from one execution of the engine."""
    cudart = _cudart()
    cudart.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    cudart.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    context = engine.create_execution_context()
    buffers = []

    def device(nbytes):
        ptr = ctypes.c_void_p()
        assert cudart.cudaMalloc(ctypes.byref(ptr), max(nbytes, 16)) == 0
        buffers.append(ptr)
        return ptr

    for name, value in zip(op.inputs, inputs):
        a = np.ascontiguousarray(value, _input_dtype(name, dtype, w_dtype))
        ptr = device(a.nbytes)
        assert cudart.cudaMemcpy(ptr, a.ctypes.data, a.nbytes, 1) == 0  # host to device
        context.set_tensor_address(name, ptr.value)
    outputs = [np.empty(shape, _numpy_dtype(op.output_dtype(name, dtype, attrs)))
               for name, shape in zip(op.outputs, _output_shapes(op, np.shape(inputs[0])))]
    pointers = [device(y.nbytes) for y in outputs]
    for name, ptr in zip(op.outputs, pointers):
        context.set_tensor_address(name, ptr.value)
    assert context.execute_async_v3(0)
    assert cudart.cudaDeviceSynchronize() == 0
    for y, ptr in zip(outputs, pointers):
        assert cudart.cudaMemcpy(y.ctypes.data, ptr, y.nbytes, 2) == 0  # device to host
    for ptr in buffers:
        cudart.cudaFree(ptr)
    return outputs[0] if len(outputs) == 1 else tuple(outputs)


def _cases():
    """Every op of the spec, its cases TensorRT can hold: dense and non-empty tensors."""
    return [pytest.param(op, dtype, case, id=f"{op.name}-{dtype}-{case.name}") for op in spec.OPS.values()
            for dtype in ONNX_TYPES for case in op.cases(dtype)
            if not case.non_contiguous and all(np.size(a) > 0 for a in case.inputs)]


@pytest.mark.parametrize("op,dtype,case", _cases())
def test_engine_matches_the_spec(trt, op, dtype, case):
    """Parsed from ONNX, built, serialized and deserialized (the plugins rebuilt from their fields),
    run: each output (Y[, H]) against the float64 reference."""
    engine, errors = _engine(trt, _model(op, dtype, list(case.inputs), **case.attrs), _Logger(trt))
    assert engine is not None, errors
    actual = _execute(trt, engine, op, list(case.inputs), dtype, case.attrs)
    if isinstance(actual, tuple):  # float8 (ml_dtypes) read as float32 for the comparison
        actual = tuple(a.astype(np.float32) if a.dtype.name == "float8_e4m3fn" else a for a in actual)
    op.check_close(actual, op.reference(*case.inputs, **case.attrs), dtype, case.inputs, case.name,
                   attrs=case.attrs)


@pytest.mark.parametrize("op,case", [pytest.param(op, case, id=f"{op.name}-{case.name}") for op in spec.OPS.values()
                                     if "W" in op.inputs for case in op.cases("float16")
                                     if not case.non_contiguous and all(np.size(a) > 0 for a in case.inputs)])
def test_engine_float32_w_with_a_float16_x(trt, op, case):
    """A float32 W beside a float16 X (a mixed-dtype call) through the parser, the builder and a
    plan: the float32 computation with W as given."""
    engine, errors = _engine(trt, _model(op, "float16", list(case.inputs), w_dtype="float32", **case.attrs),
                             _Logger(trt))
    assert engine is not None, errors
    actual = _execute(trt, engine, op, list(case.inputs), "float16", case.attrs, w_dtype="float32")
    if isinstance(actual, tuple):  # float8 (ml_dtypes) read as float32 for the comparison
        actual = tuple(a.astype(np.float32) if a.dtype.name == "float8_e4m3fn" else a for a in actual)
    inputs = [np.asarray(a, np.float32) if name == "W" else a for name, a in zip(op.inputs, case.inputs)]
    op.check_close(actual, op.reference(*inputs, **case.attrs), "float16", case.inputs, case.name, attrs=case.attrs)


def _bad_shape_cases():
    """The spec's bad inputs of a float type and no bad attribute: refused by the plugin itself
    (getOutputShapes), not by the parser."""
    return [pytest.param(op, case, id=f"{op.name}-{case.name}") for op in spec.OPS.values() for case in op.bad_cases()
            if not case.attrs and all(np.asarray(a).dtype == np.float32 for a in case.inputs)]


@pytest.mark.parametrize("op,case", _bad_shape_cases())
def test_engine_refuses_bad_shapes_with_the_canonical_message(trt, op, case):
    logger = _Logger(trt)
    engine, errors = _engine(trt, _model(op, "float32", list(case.inputs)), logger)
    assert engine is None
    text = "\n".join(errors + logger.lines)
    assert f"opforge.{op.name}: " in text, text
    for mention in case.mentions:
        assert mention in text, (case.name, text)
    if "R" in op.inputs and "R" in case.mentions:
        assert op.r_error(np.shape(case.inputs[0]), np.shape(case.inputs[op.inputs.index("R")])) in text, text


def test_engine_refuses_wrong_w_with_the_canonical_message(trt):
    logger = _Logger(trt)
    op = spec.RMS_NORM
    engine, errors = _engine(trt, _model(op, "float32", [np.ones((4, 64), np.float32), np.ones(32, np.float32)]),
                             logger)
    assert engine is None
    text = "\n".join(errors + logger.lines)
    assert "opforge.RMSNorm: W: expected 1-D tensor of length 64 (last dim of X), got shape [32]" in text, text
