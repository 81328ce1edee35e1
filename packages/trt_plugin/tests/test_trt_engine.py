"""TensorRT itself: ONNX models with opforge nodes, built into engines through the ONNX parser's
plugin fallback, run, compared with opforge_spec's references; and the plugin's refusal of a wrong W
at build time. Needs the `tensorrt` package (10.x) and a GPU: skipped otherwise, with the reason.
Device buffers come from libcudart through ctypes (no torch, no cuda-python needed)."""
from __future__ import annotations

import ctypes

import numpy as np
import opforge_trt
import pytest

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


def _model(op: str, dtype: str, shapes: list, **attrs) -> bytes:
    names = ["X", "W"][: len(shapes)]
    attrs = {k: float(v) for k, v in attrs.items()}  # FLOAT attributes, as the exporters write them
    node = helper.make_node(op, names, ["Y"], domain="opforge", name=f"{op}_0", **attrs)
    graph = helper.make_graph(
        [node], f"{op}_graph",
        [helper.make_tensor_value_info(n, ONNX_TYPES[dtype], list(s)) for n, s in zip(names, shapes)],
        [helper.make_tensor_value_info("Y", ONNX_TYPES[dtype], list(shapes[0]))])
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


def _execute(trt, engine, inputs: dict, out_shape, dtype):
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

    for name, value in inputs.items():
        a = np.ascontiguousarray(value, dtype)
        ptr = device(a.nbytes)
        assert cudart.cudaMemcpy(ptr, a.ctypes.data, a.nbytes, 1) == 0  # host to device
        context.set_tensor_address(name, ptr.value)
    y = np.empty(out_shape, dtype)
    out = device(y.nbytes)
    context.set_tensor_address("Y", out.value)
    assert context.execute_async_v3(0)
    assert cudart.cudaDeviceSynchronize() == 0
    assert cudart.cudaMemcpy(y.ctypes.data, out, y.nbytes, 2) == 0  # device to host
    for ptr in buffers:
        cudart.cudaFree(ptr)
    return y


def _cases(op, names):
    return [pytest.param(dtype, case, id=f"{dtype}-{case.name}") for dtype in ONNX_TYPES
            for case in op.cases(dtype) if case.name in names]


@pytest.mark.parametrize("dtype,case", _cases(spec.SWISH, {"random", "beta_1.7", "huge_pm_1e4", "nan_inf", "batch1"}))
def test_engine_swish(trt, dtype, case):
    (x,) = case.inputs
    engine, errors = _engine(trt, _model("Swish", dtype, [x.shape], **case.attrs), _Logger(trt))
    assert engine is not None, errors
    y = _execute(trt, engine, {"X": x}, x.shape, dtype)
    spec.SWISH.check_close(y, spec.SWISH.reference(x, **case.attrs), dtype, (x,), case.name)


@pytest.mark.parametrize("dtype,case", _cases(spec.RMS_NORM, {"random", "rank3_odd", "zero_rows_eps0", "nan_inf", "large"}))
def test_engine_rms_norm(trt, dtype, case):
    x, w = case.inputs
    engine, errors = _engine(trt, _model("RMSNorm", dtype, [x.shape, w.shape], **case.attrs), _Logger(trt))
    assert engine is not None, errors
    y = _execute(trt, engine, {"X": x, "W": w}, x.shape, dtype)
    spec.RMS_NORM.check_close(y, spec.RMS_NORM.reference(x, w, **case.attrs), dtype, (x,), case.name)


def test_engine_refuses_wrong_w_with_the_canonical_message(trt):
    logger = _Logger(trt)
    engine, errors = _engine(trt, _model("RMSNorm", "float32", [(4, 64), (32,)]), logger)
    assert engine is None
    text = "\n".join(errors + logger.lines)
    assert "opforge.RMSNorm: W: expected 1-D tensor of length 64 (last dim of X), got shape [32]" in text, text
