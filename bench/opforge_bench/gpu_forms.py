"""Per op of the spec, what the GPU bench times: the inputs a user has ([tokens, hidden], or
[tokens, 2 x width] for the gated ops), the composed eager torch form, opforge_torch's op and
Liger-Kernel's kernel where Liger has one. Keyed by the op's torch name (bench/tests checks that
every op of opforge_spec has a form here)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

EPS = 1e-6


@dataclass(frozen=True)
class Form:
    torch_name: str
    gated: bool                       # X [tokens, 2 * width] -> Y [tokens, width]
    inputs: Callable                  # (tokens, width, dtype, device) -> tuple of tensors
    composed: Callable                # (*inputs) -> tensor or tuple of tensors
    opforge: Callable
    liger: str | None = None          # the Liger-Kernel autograd Function ("module.Class")
    liger_args: Callable | None = None  # (*inputs) -> (Liger's tensors, its extra arguments)


def _rand(shape, dtype, device):
    return torch.randn(shape, dtype=torch.float32, device=device).to(dtype)


def _weight(width, dtype, device):
    return (torch.rand(width, dtype=torch.float32, device=device) + 0.5).to(dtype)


def _x(tokens, width, dtype, device):
    return (_rand((tokens, width), dtype, device),)


def _x_w(tokens, width, dtype, device):
    return _rand((tokens, width), dtype, device), _weight(width, dtype, device)


def _gated_x(tokens, width, dtype, device):
    return (_rand((tokens, 2 * width), dtype, device),)


def _x_r_w(tokens, width, dtype, device):
    return (_rand((tokens, width), dtype, device), _rand((tokens, width), dtype, device),
            _weight(width, dtype, device))


def llama_rms_norm(x, w):
    """Hugging Face's LlamaRMSNorm: float32 statistics, normalized X cast back, times W."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS)
    return w * h.to(x.dtype)


def _swiglu(x):
    a, b = x.chunk(2, dim=-1)
    return F.silu(a) * b


def _geglu(x):
    a, b = x.chunk(2, dim=-1)
    return F.gelu(a, approximate="tanh") * b


def _add_rms_norm(x, r, w):
    s = x + r
    return llama_rms_norm(s, w), s


def _halves(x):
    """Liger's gated kernels take the two halves as separate contiguous tensors (its MLPs' gate
    and up projections): the same bytes as X, made once outside the timing."""
    a, b = x.chunk(2, dim=-1)
    return (a.contiguous(), b.contiguous()), ()


FORMS = {form.torch_name: form for form in (
    Form("swish", False, _x, lambda x: x * torch.sigmoid(x),
         lambda x: torch.ops.opforge.swish(x, 1.0)),  # no Liger kernel: gpu_report.NO_LIGER
    Form("rms_norm", False, _x_w, llama_rms_norm,
         lambda x, w: torch.ops.opforge.rms_norm(x, w, EPS),
         liger="liger_kernel.ops.rms_norm.LigerRMSNormFunction",
         liger_args=lambda x, w: ((x, w), (EPS, 0.0, "llama", False))),
    Form("swiglu", True, _gated_x, _swiglu, lambda x: torch.ops.opforge.swiglu(x, 1.0),
         liger="liger_kernel.ops.swiglu.LigerSiLUMulFunction", liger_args=_halves),
    Form("geglu", True, _gated_x, _geglu, lambda x: torch.ops.opforge.geglu(x),  # noqa: PLW0108  (looked up when called: a build without geglu still imports)
         liger="liger_kernel.ops.geglu.LigerGELUMulFunction", liger_args=_halves),
    Form("add_rms_norm", False, _x_r_w, _add_rms_norm,
         lambda x, r, w: torch.ops.opforge.add_rms_norm(x, r, w, EPS),
         liger="liger_kernel.ops.fused_add_rms_norm.LigerFusedAddRMSNormFunction",
         liger_args=lambda x, r, w: ((x, r, w), (EPS, 0.0, "llama", False))),
)}


def as_tuple(out) -> tuple:
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def forward_bytes(inputs: tuple, outputs: tuple) -> int:
    """What a fused forward must move: every input read once, every output written once."""
    return sum(t.numel() * t.element_size() for t in (*inputs, *outputs))


def backward_bytes(inputs: tuple, outputs: tuple) -> int:
    """What a fused backward must move: the output gradients and the saved inputs read, one
    gradient per input written."""
    return forward_bytes(inputs, outputs) + sum(t.numel() * t.element_size() for t in inputs)


def liger_function(form: Form):
    """The Liger autograd Function, or raises ImportError/AttributeError with the reason."""
    module, _, name = form.liger.rpartition(".")
    return getattr(__import__(module, fromlist=[name]), name)

