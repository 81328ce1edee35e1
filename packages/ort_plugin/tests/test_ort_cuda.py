"""CUDA execution provider kernels (float32, float16). Needs a CUDA build of the plugin, an
onnxruntime with the CUDA EP and a GPU; skipped with the reason otherwise."""
from __future__ import annotations

import glob

import numpy as np
import onnxruntime as ort
import pytest
from ort_models import (
    check_residual_stream,
    output_shapes,
    residual_stream_model,
    result,
    served,
    single_op_model,
)

import opforge_ort
import opforge_spec as spec


def _cuda_session(model: bytes) -> ort.InferenceSession:
    if not opforge_ort.build_info()["cuda"]:
        pytest.skip("no GPU kernels: opforge_ort was built without OPFORGE_CUDA_HOME")
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        pytest.skip(f"no GPU: onnxruntime {ort.__version__} has no CUDAExecutionProvider")
    if not glob.glob("/dev/nvidia[0-9]*"):  # onnxruntime-gpu lists its CUDA EP on any machine
        pytest.skip("no GPU: no NVIDIA device (/dev/nvidia<N>)")
    if hasattr(ort, "preload_dlls"):
        ort.preload_dlls()  # the CUDA/cuDNN wheels the matrix pins beside onnxruntime-gpu (no torch here)
    options = opforge_ort.session_options()
    options.log_severity_level = 3
    # Every node must run on the GPU: a silent fall back to the CPU kernels would prove nothing.
    options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    try:
        return ort.InferenceSession(model, options, providers=["CUDAExecutionProvider"])
    except Exception as exc:
        if "CUDA" in str(exc) and ("driver" in str(exc) or "no CUDA-capable device" in str(exc)):
            pytest.skip(f"no GPU: {str(exc).splitlines()[0]}")
        raise


def _cases():
    """Every case the CUDA EP can serve: dense, and no output type ORT cannot register (a float8 Q:
    the README's finding; test_ort_numerics checks its refusal)."""
    return [pytest.param(op, dtype, case, id=f"{op.name}-{dtype}-{case.name}") for op in spec.OPS.values()
            for dtype in ("float32", "float16") for case in op.cases(dtype)
            if not case.non_contiguous and served(op.name, case.attrs)]


@pytest.mark.parametrize("op,dtype,case", _cases())
def test_cuda_matches_reference(op, dtype, case):
    x = case.inputs[0]
    sess = _cuda_session(single_op_model(op.name, dtype, np.ndim(x), **case.attrs))
    outputs = sess.run(None, {name: np.asarray(a, dtype) for name, a in zip(op.inputs, case.inputs)})
    assert [o.shape for o in outputs] == output_shapes(op.name, np.shape(x))
    op.check_close(result(op.name, outputs), op.reference(*case.inputs, **case.attrs), dtype, (x,), case.name,
                   attrs=case.attrs)


def _mixed_cases():
    """A float32 W beside a float16 X (the CUDA EP's mixed-dtype kernels)."""
    return [pytest.param(op, case, id=f"{op.name}-{case.name}") for op in spec.OPS.values() if "W" in op.inputs
            for case in op.cases("float16") if not case.non_contiguous and served(op.name, case.attrs)]


@pytest.mark.parametrize("op,case", _mixed_cases())
def test_cuda_float32_w_with_float16_x(op, case):
    x = case.inputs[0]
    sess = _cuda_session(single_op_model(op.name, "float16", np.ndim(x), w_dtype="float32", **case.attrs))
    feeds = {name: np.asarray(a, np.float32 if name == "W" else np.float16) for name, a in zip(op.inputs, case.inputs)}
    outputs = sess.run(None, feeds)
    assert [o.shape for o in outputs] == output_shapes(op.name, np.shape(x))
    expected = op.reference(*(np.asarray(feeds[n], np.float64) if n == "W" else a for n, a in zip(op.inputs, case.inputs)),
                            **case.attrs)
    op.check_close(result(op.name, outputs), expected, "float16", (x,), case.name, attrs=case.attrs)


def test_cuda_residual_stream():
    """Two chained AddRMSNorm nodes on the GPU, H1 the second one's residual (ranks 2-4)."""
    rng = np.random.default_rng(17)
    for shape in [(5, 64), (2, 7, 96), (2, 3, 4, 1031), (0, 16)]:
        sess = _cuda_session(residual_stream_model(len(shape)))
        feeds = {"X": rng.standard_normal(shape).astype(np.float32),
                 "R": rng.standard_normal(shape).astype(np.float32),
                 "W1": rng.uniform(0.5, 1.5, shape[-1]).astype(np.float32),
                 "W2": rng.uniform(0.5, 1.5, shape[-1]).astype(np.float32)}
        check_residual_stream(sess.run(None, feeds), feeds, "float32", f"CUDA residual stream {shape}")
