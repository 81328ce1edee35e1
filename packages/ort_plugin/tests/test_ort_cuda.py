"""CUDA execution provider kernels (float32, float16). Needs a CUDA build of the plugin, an
onnxruntime with the CUDA EP and a GPU; skipped with the reason otherwise."""
from __future__ import annotations

import glob

import numpy as np
import onnxruntime as ort
import pytest

import opforge_ort
import opforge_spec as spec
from ort_models import single_op_model


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


def _cases(op):
    return [pytest.param(dtype, case, id=f"{dtype}-{case.name}") for dtype in ("float32", "float16")
            for case in op.cases(dtype) if not case.non_contiguous]


@pytest.mark.parametrize("dtype,case", _cases(spec.SWISH))
def test_cuda_swish(dtype, case):
    (x,) = case.inputs
    sess = _cuda_session(single_op_model("Swish", dtype, np.ndim(x), **case.attrs))
    (y,) = sess.run(None, {"X": np.asarray(x, dtype)})
    spec.SWISH.check_close(y, spec.SWISH.reference(x, **case.attrs), dtype, (x,), case.name)


@pytest.mark.parametrize("dtype,case", _cases(spec.RMS_NORM))
def test_cuda_rms_norm(dtype, case):
    x, w = case.inputs
    sess = _cuda_session(single_op_model("RMSNorm", dtype, np.ndim(x), **case.attrs))
    (y,) = sess.run(None, {"X": np.asarray(x, dtype), "W": np.asarray(w, dtype)})
    spec.RMS_NORM.check_close(y, spec.RMS_NORM.reference(x, w, **case.attrs), dtype, (x,), case.name)


@pytest.mark.parametrize("dtype,case", _cases(spec.SWIGLU))
def test_cuda_swiglu(dtype, case):
    (x,) = case.inputs
    sess = _cuda_session(single_op_model("SwiGLU", dtype, np.ndim(x), **case.attrs))
    (y,) = sess.run(None, {"X": np.asarray(x, dtype)})
    spec.SWIGLU.check_close(y, spec.SWIGLU.reference(x, **case.attrs), dtype, (x,), case.name)
