"""Layer 1: torch composed ops <-> opforge_torch, per device and dtype, against the float64
reference and against each other."""
from __future__ import annotations

import numpy as np
import torch

from .checks import (
    Results,
    against_neighbour,
    against_reference,
    failed,
    inject_fault,
    skipped,
    spec,
)

DTYPES = ("float32", "float64", "bfloat16")
CUDA_ONLY = ("float16",)
TORCH_DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16,
                "float16": torch.float16}


def to_torch(a: np.ndarray, dtype: str, device: str, non_contiguous: bool = False) -> torch.Tensor:
    """The case's values as a torch tensor (bfloat16 arrays arrive as float32 holding bf16 values,
    so the conversion is exact); `non_contiguous`: every other element of a wider buffer."""
    t = torch.from_numpy(np.array(a, order="C"))  # ascontiguousarray makes rank 0 rank 1
    t = t.to(device=device, dtype=TORCH_DTYPES[dtype])
    if not non_contiguous or t.dim() == 0:
        return t
    wide = torch.zeros(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype, device=device)
    wide[..., ::2] = t
    view = wide[..., ::2]
    assert not view.is_contiguous() or view.numel() <= 1
    return view


def to_numpy(t):
    """float32 for bfloat16 (exact), the tensor's own dtype otherwise; a tuple of them for the
    outputs of an op of several (AddRMSNorm's Y, H)."""
    if isinstance(t, (tuple, list)):
        return tuple(to_numpy(v) for v in t)
    t = t.detach().cpu()
    widened = (torch.bfloat16, torch.float16, torch.float8_e4m3fn)  # float8 (a quantized Q): numpy has none
    return (t.float() if t.dtype in widened else t).numpy()


# Each op's composed torch form is the spec's (opforge_spec.OpSpec.composed).
COMPOSED = {name: op.composed for name, op in spec.OPS.items()}


def _attr_args(op, attrs) -> list:
    # Float attributes are float32 everywhere (ONNX, the kernels); the reference rounds them the
    # same way. An int or enum attribute is an int (the torch schemas' `int`).
    values = {**op.defaults(), **attrs}
    return [float(np.float32(values[k])) if a.kind == "float" else int(values[k]) for k, a in op.attributes.items()]


def opforge_call(op):
    import opforge_torch  # noqa: F401  (registers torch.ops.opforge)

    return getattr(torch.ops.opforge, op.torch_name)


def devices() -> tuple:
    return ("cpu", "cuda") if torch.cuda.is_available() else ("cpu",)


def run(ops=None, dtypes=DTYPES, fault: str | None = None) -> Results:
    results = Results(context={"torch": torch.__version__})
    for op in ops or spec.OPS.values():
        if "cuda" not in devices():
            results.add(skipped("no GPU: torch.cuda.is_available() is False", layer="1", op=op.name,
                                dtype="*", subject="opforge_torch.cuda", against="reference"))
        for device in devices():
            # float16 only where the kernels have it (CUDA); float64 only on the CPU
            for dtype in (*dtypes, *(CUDA_ONLY if device == "cuda" else ())):
                if device == "cuda" and dtype == "float64":
                    results.add(skipped("the CUDA kernels take float32/float16/bfloat16 only",
                                        layer="1", op=op.name, dtype=dtype, against="reference",
                                        subject="opforge_torch.cuda"))
                    continue
                _run_one(results, op, device, dtype, fault)
    return results


def _run_one(results: Results, op, device: str, dtype: str, fault) -> None:
    fused = opforge_call(op)
    for case in op.cases(dtype):
        inputs = [to_torch(a, dtype, device, case.non_contiguous and i == 0)
                  for i, a in enumerate(case.inputs)]
        attrs = _attr_args(op, case.attrs)
        where = {"layer": "1", "case": case.name}
        try:
            ours = inject_fault(fault, to_numpy(fused(*inputs, *attrs)), dtype)
        except RuntimeError as err:  # the op refused a valid case: a failure, reported
            results.add(failed(f"opforge_torch raised: {err}", op=op.name, dtype=dtype,
                               subject=f"opforge_torch.{device}", against="reference", **where))
            continue
        composed_form = COMPOSED[op.name]
        assert composed_form is not None  # every op of the spec has a composed form
        composed = to_numpy(composed_form(*inputs, *attrs))
        results.add(against_reference(op, ours, case.inputs, case.attrs, dtype,
                                      subject=f"opforge_torch.{device}", **where))
        results.add(against_reference(op, composed, case.inputs, case.attrs, dtype,
                                      subject=f"torch_composed.{device}", **where))
        results.add(against_neighbour(op, ours, composed, case.inputs, dtype, attrs=case.attrs,
                                      subject=f"opforge_torch.{device}",
                                      against=f"torch_composed.{device}", **where))
