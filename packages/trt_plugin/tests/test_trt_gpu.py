"""enqueue on a real GPU, without TensorRT: the test host creates each plugin of the spec, calls
onShapeChange and enqueue on its own CUDA stream, and every output is checked against
opforge_spec's references.
Skipped here (no GPU); runs on any machine with a GPU and a driver."""
from __future__ import annotations

import subprocess

import numpy as np
import pytest

import opforge_trt

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
    if dtype == "float8_e4m3fn":  # numpy has none: ml_dtypes' (onnx depends on it)
        import ml_dtypes

        return np.frombuffer(data, ml_dtypes.float8_e4m3fn).astype(np.float32).reshape(shape)
    return np.frombuffer(data, dtype).reshape(shape)


def _cases():
    return [pytest.param(op, dtype, case, id=f"{op.name}-{dtype}-{case.name}") for op in spec.OPS.values()
            for dtype in TRT_TYPES for case in op.cases(dtype) if not case.non_contiguous]


def _output_shapes(op, x_shape) -> list:
    """Each output's shape by its rule (Y the op's, H X's, a per-row scale X's with the last dim 1)."""
    return [tuple(op.output_shape_of(name, x_shape)) for name in op.outputs]


def _run(host, tmp_path, op, dtype, case, w_dtype=None):
    """The op's outputs (one array, or a tuple Y, H) from one enqueue, and the float64 reference
    (w_dtype: W's dtype, if not X's: the reference takes W as the kernel got it)."""
    attrs = ",".join(f"{name}={float(value)!r}" for name, value in case.attrs.items()) or "-"
    outs = [tmp_path / f"{name}.bin" for name in op.outputs]
    dtypes = [w_dtype if name == "W" and w_dtype else dtype for name in op.inputs]
    args = [str(host), opforge_trt.library_path(), "run", op.name, ",".join(str(TRT_TYPES[t]) for t in dtypes), attrs,
            ",".join(map(str, outs))]
    inputs = list(case.inputs)
    for i, (name, a, input_dtype) in enumerate(zip(op.inputs, case.inputs, dtypes)):
        path = tmp_path / f"{name}.bin"
        path.write_bytes(_to_bytes(a, input_dtype))
        args += [str(path), ",".join(str(d) for d in np.shape(a))]
        if input_dtype != dtype:
            inputs[i] = np.asarray(a, input_dtype).astype(np.float64)
    run = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    dtypes = [op.output_dtype(name, dtype, case.attrs) for name in op.outputs]  # X's, or the output's own
    got = tuple(_from_bytes(out.read_bytes(), out_dtype, shape)
                for out, out_dtype, shape in zip(outs, dtypes, _output_shapes(op, np.shape(case.inputs[0]))))
    return got[0] if len(got) == 1 else got, op.reference(*inputs, **case.attrs)


@pytest.mark.parametrize("op,dtype,case", _cases())
def test_gpu_matches_the_spec(gpu_host, tmp_path, op, dtype, case):
    """Every op of the spec, every case, each output (Y[, H]) against the float64 reference."""
    actual, expected = _run(gpu_host, tmp_path, op, dtype, case)
    op.check_close(actual, expected, dtype, case.inputs, case.name, attrs=case.attrs)


def _mixed_cases():
    return [pytest.param(op, dtype, case, id=f"{op.name}-{dtype}-{case.name}") for op in spec.OPS.values()
            if "W" in op.inputs for dtype in ("float16", "bfloat16") for case in op.cases(dtype)
            if not case.non_contiguous]


@pytest.mark.parametrize("op,dtype,case", _mixed_cases())
def test_gpu_float32_w_with_a_16_bit_x(gpu_host, tmp_path, op, dtype, case):
    """A float32 W beside a float16/bfloat16 X (a mixed-dtype call): the float32 computation with
    W as given, each output of its own type."""
    actual, expected = _run(gpu_host, tmp_path, op, dtype, case, w_dtype="float32")
    op.check_close(actual, expected, dtype, case.inputs, case.name, attrs=case.attrs)
