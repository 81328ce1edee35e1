"""The `trt` runtime: a TensorRT engine built from the model (every compared tensor marked as an
output, opforge_trt's plugins loaded before parsing), run on the GPU.

Device memory goes through libcudart by ctypes, so nothing beyond TensorRT's own Python package
is needed (no torch, no cuda-python in the ORT venvs the matrix runs this in)."""
from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os

import numpy as np

import opforge_spec as spec

from .errors import AlignError

H2D, D2H = 1, 2  # cudaMemcpyKind

# The standard ONNX ops that compute an opforge op (each op's OpSpec.standard: an export's
# decomposed="auto" writes them where the runtime has them) and the TensorRT version whose ONNX
# parser takes each natively, no plugin needed: the TensorRT rows of opforge_torch's export table
# (from TensorRT's documentation, not checked by building an engine here; a test holds the two
# equal): RMSNormalization-23 a native RMSNorm from 10.15, Swish-24 from 11.0; SwiGLU-28 in none.
NATIVE_SINCE: dict[str, tuple[int, ...] | None] = {
    "RMSNormalization": (10, 15), "Swish": (11, 0), "SwiGLU": None}


def unavailable() -> str | None:
    """Why TensorRT cannot run here ("TensorRT unavailable: ..."), or None."""
    try:
        import tensorrt  # noqa: F401
    except (ImportError, OSError) as err:  # OSError: libnvinfer missing
        return f"TensorRT unavailable: import tensorrt failed ({type(err).__name__}: {err})"
    if _cudart() is None:
        return "TensorRT unavailable: no CUDA runtime library (libcudart.so) found"
    if gpu_count() == 0:
        return "TensorRT unavailable: no GPU (cudaGetDeviceCount found none)"
    return None


def gpu_count() -> int:
    """GPUs the CUDA runtime sees (0 without a runtime library, a driver or a device)."""
    cudart = _cudart()
    count = ctypes.c_int(0)
    if cudart is None or cudart.cudaGetDeviceCount(ctypes.byref(count)) != 0:
        return 0
    return count.value


def needs_plugin(proto) -> bool:
    """Whether the model has opforge nodes (its standard ops need no plugin)."""
    return any(node.domain == spec.DOMAIN for node in proto.graph.node)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int("".join(c for c in p if c.isdigit()) or 0) for p in text.split(".")[:2])


def native_op_refusal(proto, version: str) -> str | None:
    """Why TensorRT `version` cannot parse the model's standard opforge-equivalent ops (the first
    such node named, the version it needs), or None."""
    for node in proto.graph.node:
        if node.domain not in ("", "ai.onnx") or node.op_type not in NATIVE_SINCE:
            continue
        since = NATIVE_SINCE[node.op_type]
        if since is None:
            return (f"node {node.name or node.op_type}: TensorRT parses no {node.op_type} (no "
                    f"version documents it); export it as the opforge node or decomposed")
        if _version(version) < since:
            return (f"node {node.name or node.op_type}: {node.op_type} needs TensorRT >= "
                    f"{'.'.join(map(str, since))}, got {version}; export with decomposed='auto', "
                    f"runtime='tensorrt', runtime_version='{version}'")
    return None


def run(model, proto, feeds: dict, names: list) -> dict:
    import tensorrt as trt

    logger = trt.Logger(trt.Logger.ERROR)
    refusal = native_op_refusal(proto, trt.__version__)
    if refusal:
        raise AlignError(f"{model.path}: trt: {refusal}")
    if needs_plugin(proto):
        _load_plugins(model, trt)
    engine = _build(model, proto, feeds, trt, logger)
    context = engine.create_execution_context()
    for name, array in feeds.items():
        context.set_input_shape(name, array.shape)
    with _Device(_cudart()) as device:
        for name, array in feeds.items():
            context.set_tensor_address(name, device.upload(np.ascontiguousarray(array)))
        outputs = {}
        for name in names:
            if engine.get_tensor_mode(name) != trt.TensorIOMode.OUTPUT:
                continue
            shape = tuple(context.get_tensor_shape(name))
            dtype = np.dtype(trt.nptype(engine.get_tensor_dtype(name)))
            outputs[name] = np.empty(shape, dtype)
            context.set_tensor_address(name, device.alloc(outputs[name].nbytes))
        if not context.execute_async_v3(0):
            raise AlignError(f"{model.path}: trt: execute_async_v3 failed")
        device.synchronize()
        for name, host in outputs.items():
            device.download(host, context.get_tensor_address(name))
    return outputs


def _load_plugins(model, trt) -> None:
    try:
        import opforge_trt

        trt.get_plugin_registry().load_library(opforge_trt.library_path())
    except (ImportError, FileNotFoundError) as err:
        raise AlignError(f"{model.path}: has {spec.DOMAIN} nodes: TensorRT needs opforge_trt's "
                         f"plugin library ({err})") from None


def _build(model, proto, feeds, trt, logger):
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(proto.SerializeToString()):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise AlignError(f"{model.path}: trt: the ONNX parser refused the model: {errors}")
    config = builder.create_builder_config()
    profile = builder.create_optimization_profile()
    for name, array in feeds.items():  # the engine is built for exactly the shapes fed
        profile.set_shape(name, array.shape, array.shape, array.shape)
    config.add_optimization_profile(profile)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise AlignError(f"{model.path}: trt: building the engine failed (see TensorRT's log)")
    return trt.Runtime(logger).deserialize_cuda_engine(serialized)


def _cudart():
    candidates = [ctypes.util.find_library("cudart"), "libcudart.so", "libcudart.so.13",
                  "libcudart.so.12"]
    for site in os.environ.get("PYTHONPATH", "").split(os.pathsep) + _site_dirs():
        candidates += glob.glob(os.path.join(site, "nvidia", "cu*", "lib", "libcudart.so*"))
        candidates += glob.glob(os.path.join(site, "nvidia", "cuda_runtime", "lib", "libcudart.so*"))
    for name in filter(None, candidates):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


def _site_dirs() -> list:
    import site

    return [*site.getsitepackages(), site.getusersitepackages()]


class _Device:
    """Device buffers freed on exit; every CUDA error is an AlignError naming the call."""

    def __init__(self, cudart):
        self.cudart, self.buffers = cudart, []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for pointer in self.buffers:
            self.cudart.cudaFree(ctypes.c_void_p(pointer))

    def _check(self, code: int, call: str) -> None:
        if code != 0:
            raise AlignError(f"trt: {call} failed with CUDA error {code}")

    def alloc(self, nbytes: int) -> int:
        pointer = ctypes.c_void_p()
        self._check(self.cudart.cudaMalloc(ctypes.byref(pointer), ctypes.c_size_t(max(nbytes, 1))),
                    "cudaMalloc")
        assert pointer.value is not None  # cudaMalloc succeeded (checked above)
        self.buffers.append(pointer.value)
        return pointer.value

    def upload(self, array: np.ndarray) -> int:
        pointer = self.alloc(array.nbytes)
        self._check(self.cudart.cudaMemcpy(ctypes.c_void_p(pointer), array.ctypes.data_as(
            ctypes.c_void_p), ctypes.c_size_t(array.nbytes), H2D), "cudaMemcpy to the device")
        return pointer

    def download(self, host: np.ndarray, pointer: int) -> None:
        self._check(self.cudart.cudaMemcpy(host.ctypes.data_as(ctypes.c_void_p), ctypes.c_void_p(
            pointer), ctypes.c_size_t(host.nbytes), D2H), "cudaMemcpy to the host")

    def synchronize(self) -> None:
        self._check(self.cudart.cudaDeviceSynchronize(), "cudaDeviceSynchronize")
