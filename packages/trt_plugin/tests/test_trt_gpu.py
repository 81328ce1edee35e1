"""enqueue on a real GPU, without TensorRT: the test host creates each plugin, calls onShapeChange
and enqueue on its own CUDA stream, and the outputs are checked against opforge_spec's references.
Skipped here (no GPU); runs on any machine with a GPU and a driver."""
from __future__ import annotations

import subprocess

import numpy as np
import opforge_trt
import pytest

spec = pytest.importorskip("opforge_spec", reason="pip install ./kernels (opforge_spec)")

TRT_TYPES = {"float32": 0, "float16": 1, "bfloat16": 7}  # nvinfer1::DataType


def _gpus(host) -> int:
    out = subprocess.run([str(host), opforge_trt.library_path(), "gpus"], capture_output=True, text=True, timeout=60)
    return int(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def gpu_host(host):
    if _gpus(host) < 1:
        pytest.skip("no GPU: cudaGetDeviceCount found no usable device")
    return host


def _to_bytes(a: np.ndarray, dtype: str) -> bytes:
    if dtype == "bfloat16":  # float32 holding bf16 values: the upper 16 bits are the bf16
        return (np.ascontiguousarray(a, np.float32).view(np.uint32) >> 16).astype(np.uint16).tobytes()
    return np.ascontiguousarray(a, dtype).tobytes()


def _from_bytes(data: bytes, dtype: str, shape) -> np.ndarray:
    if dtype == "bfloat16":
        return (np.frombuffer(data, np.uint16).astype(np.uint32) << 16).view(np.float32).reshape(shape)
    return np.frombuffer(data, dtype).reshape(shape)


def _cases(op):
    return [pytest.param(dtype, case, id=f"{dtype}-{case.name}") for dtype in TRT_TYPES
            for case in op.cases(dtype) if not case.non_contiguous]


def _run(host, tmp_path, op, dtype, case):
    attr_name = next(iter(op.attributes))
    attr = case.attrs.get(attr_name, op.attributes[attr_name].default)
    args = [str(host), opforge_trt.library_path(), "run", op.name, str(TRT_TYPES[dtype]), repr(float(attr)),
            str(tmp_path / "y.bin")]
    for i, a in enumerate(case.inputs):
        path = tmp_path / f"in{i}.bin"
        path.write_bytes(_to_bytes(a, dtype))
        args += [str(path), ",".join(str(d) for d in np.shape(a))]
    run = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    x = case.inputs[0]
    y_shape = spec.output_shape(op, np.shape(x))
    return _from_bytes((tmp_path / "y.bin").read_bytes(), dtype, y_shape), op.reference(*case.inputs, **case.attrs)


@pytest.mark.parametrize("dtype,case", _cases(spec.SWISH))
def test_gpu_swish(gpu_host, tmp_path, dtype, case):
    y, expected = _run(gpu_host, tmp_path, spec.SWISH, dtype, case)
    spec.SWISH.check_close(y, expected, dtype, case.inputs, case.name)


@pytest.mark.parametrize("dtype,case", _cases(spec.RMS_NORM))
def test_gpu_rms_norm(gpu_host, tmp_path, dtype, case):
    y, expected = _run(gpu_host, tmp_path, spec.RMS_NORM, dtype, case)
    spec.RMS_NORM.check_close(y, expected, dtype, case.inputs, case.name)


@pytest.mark.parametrize("dtype,case", _cases(spec.SWIGLU))
def test_gpu_swiglu(gpu_host, tmp_path, dtype, case):
    y, expected = _run(gpu_host, tmp_path, spec.SWIGLU, dtype, case)
    spec.SWIGLU.check_close(y, expected, dtype, case.inputs, case.name)
