"""Shared helpers: numpy (opforge_spec) <-> torch, devices, dtypes."""

import os

import numpy as np
import pytest
import torch

import opforge_spec as spec
import opforge_torch  # noqa: F401  (registers the ops)
from opforge_torch import onnx as opforge_onnx

TORCH_DTYPES = {"float64": torch.float64, "float32": torch.float32,
                "float16": torch.float16, "bfloat16": torch.bfloat16}
CPU_DTYPES = ("float32", "float64", "bfloat16")
CUDA_DTYPES = ("float32", "float16", "bfloat16")


def pytest_configure(config):
    """Under pytest-xdist each worker gets its share of torch's threads: torch's default, one per
    core in every worker, oversubscribes the cores (measured: the suite under `-n 2` took twice as
    long). test_numerics.py runs the threaded paths with 4 threads explicitly."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        torch.set_num_threads(max(1, torch.get_num_threads() // workers))
    # the dynamo exports here are many and small: one torchlib op list per worker, not per export
    opforge_onnx.reuse_torchlib_registry()


def to_torch(array, dtype: str, device="cpu", non_contiguous=False) -> torch.Tensor:
    """Exact conversion of a spec array (bfloat16 arrives as float32 holding bf16 values)."""
    t = torch.from_numpy(np.array(array, dtype=np.float64)).to(TORCH_DTYPES[dtype])
    t = t.to(device)
    if non_contiguous and t.dim() > 0:
        wide = torch.zeros(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype, device=device)
        wide[..., ::2] = t
        t = wide[..., ::2]
        assert not t.is_contiguous() or t.numel() <= 1
    return t


def to_numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().to(torch.float64).numpy()


def run_op(op: spec.OpSpec, inputs, attrs):
    fn = getattr(torch.ops.opforge, op.torch_name)
    return fn(*inputs, *(attrs.get(k, a.default) for k, a in op.attributes.items()))


def require_cuda():
    if not torch.cuda.is_available():
        pytest.skip("no GPU: CUDA kernels are compiled here but can only run on a GPU machine")
