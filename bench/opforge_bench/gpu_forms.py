"""Per op of the spec, what the GPU bench times: the inputs a user has ([tokens, hidden], or
[tokens, 2 x width] for the gated ops), the composed eager torch form (the spec's, unless a user
writes the op another way: PEERS), opforge_torch's op and Liger-Kernel's kernel where Liger has
one. Built from opforge_spec.OPS and keyed by the op's torch name."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

import opforge_spec

from .gpu_report import LIGER_KERNELS

EPS = opforge_spec.RMS_NORM.defaults()["epsilon"]


@dataclass(frozen=True)
class Form:
    torch_name: str
    gated: bool                       # X [tokens, 2 * width] -> Y [tokens, width]
    inputs: Callable                  # (tokens, width, dtype, device) -> tuple of tensors
    composed: Callable                # (*inputs) -> tensor or tuple of tensors
    opforge: Callable
    liger: str | None = None          # the Liger-Kernel autograd Function ("module.Class")
    liger_args: Callable | None = None  # (*inputs) -> (Liger's tensors, its extra arguments)


@dataclass(frozen=True)
class Peer:
    """How users write an op instead of the spec's composed form, and Liger's kernel for it."""
    composed: Callable | None = None
    liger: str | None = None
    liger_args: Callable | None = None


def _rand(shape, dtype, device, gen):
    return torch.randn(shape, dtype=torch.float32, device=device, generator=gen).to(dtype)


def _weight(width, dtype, device, gen):
    return (torch.rand(width, dtype=torch.float32, device=device, generator=gen) + 0.5).to(dtype)


def _input_maker(spec: opforge_spec.OpSpec) -> Callable:
    """(tokens, width, dtype, device) -> the op's inputs: X [tokens, split * width], a residual R
    [tokens, width], a weight W [width]."""
    def make(tokens, width, dtype, device):
        shapes = {"X": (tokens, spec.split * width), "R": (tokens, width)}
        gen = torch.Generator(device=device).manual_seed(0)
        return tuple(_weight(width, dtype, device, gen) if name == "W" else
                     _rand(shapes[name], dtype, device, gen) for name in spec.inputs)
    return make


def llama_rms_norm(x, w):
    """Hugging Face's LlamaRMSNorm: float32 statistics, normalized X cast back, times W."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS)
    return w * h.to(x.dtype)


def _silu_mul(x):
    a, b = x.chunk(2, dim=-1)
    return F.silu(a) * b


def _halves(x):
    """Liger's gated kernels take the two halves as separate contiguous tensors (its MLPs' gate
    and up projections): the same bytes as X, made once outside the timing."""
    a, b = x.chunk(2, dim=-1)
    return (a.contiguous(), b.contiguous()), ()


def _norm_args(*tensors):
    return tensors, (EPS, 0.0, "llama", False)


# What users write is the eager bar: F.silu is one kernel where the spec's composed Swish,
# x * (beta * x).sigmoid(), is three. Swish has no Liger kernel (gpu_report.NO_LIGER).
PEERS = {
    "swish": Peer(F.silu),
    "rms_norm": Peer(llama_rms_norm, LIGER_KERNELS["rms_norm"], _norm_args),
    "swiglu": Peer(_silu_mul, LIGER_KERNELS["swiglu"], _halves),
    "geglu": Peer(None, LIGER_KERNELS["geglu"], _halves),
    "add_rms_norm": Peer(None, LIGER_KERNELS["add_rms_norm"], _norm_args),
}


def _opforge_call(spec: opforge_spec.OpSpec) -> Callable:
    """opforge's op with the spec's default attributes (looked up when called: the table builds
    without the library)."""
    defaults = tuple(spec.defaults().values())
    return lambda *tensors: getattr(torch.ops.opforge, spec.torch_name)(*tensors, *defaults)


def _form(spec: opforge_spec.OpSpec) -> Form:
    peer = PEERS.get(spec.torch_name, Peer())
    composed = peer.composed or spec.composed
    assert composed is not None  # every op of the spec has a composed form
    return Form(spec.torch_name, spec.split > 1, _input_maker(spec), composed,
                _opforge_call(spec), peer.liger, peer.liger_args)


FORMS = {spec.torch_name: _form(spec) for spec in opforge_spec.OPS.values()}


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
    if form.liger is None:
        raise AttributeError(f"{form.torch_name}: no Liger kernel")
    module, _, name = form.liger.rpartition(".")
    return getattr(__import__(module, fromlist=[name]), name)

