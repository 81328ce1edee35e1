"""The torch layer: composed ops vs torch.nn.functional's native op vs opforge_torch, each where
possible both allocating its output and writing into a preallocated one (out=)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

COLS = 4096  # RMSNorm row length (a common hidden size); rows = n / COLS
EPS = 1e-6


def available() -> str:
    """"" if opforge_torch imports, else why not."""
    try:
        import opforge_torch  # noqa: F401
    except (ImportError, OSError) as err:  # not installed, or built for another torch
        return f"opforge_torch not importable: {err}"
    return ""


def swish_variants(n: int) -> dict:
    """{name: (callable, allocating)}; inputs built once here."""
    x = torch.randn(n)
    y, tmp = torch.empty_like(x), torch.empty_like(x)
    out = {
        "torch composed": (lambda: x * torch.sigmoid(x), True),
        "torch composed out=": (lambda: torch.mul(x, torch.sigmoid(x, out=tmp), out=y), False),
        "F.silu": (lambda: F.silu(x), True),
        "F.silu out=": (lambda: torch.ops.aten.silu.out(x, out=y), False),
    }
    if not available():
        out["opforge_torch"] = (lambda: torch.ops.opforge.swish(x, 1.0), True)
    return out


def rms_norm_variants(n: int) -> dict:
    rows = max(n // COLS, 1)
    x, w = torch.randn(rows, COLS), torch.rand(COLS) + 0.5
    y, sq, ms = torch.empty_like(x), torch.empty_like(x), torch.empty(rows, 1)

    def composed_out():
        torch.mul(x, x, out=sq)
        torch.mean(sq, dim=-1, keepdim=True, out=ms)
        ms.add_(EPS).rsqrt_()
        torch.mul(x, ms, out=y)
        return y.mul_(w)

    out = {
        "torch composed": (lambda: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w, True),
        "torch composed out=": (composed_out, False),
        "F.rms_norm": (lambda: F.rms_norm(x, (COLS,), w, EPS), True),
    }
    if not available():
        out["opforge_torch"] = (lambda: torch.ops.opforge.rms_norm(x, w, EPS), True)
    return out


def memcpy(n: int):
    src = torch.randn(n)
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src)


def not_measured(op: str) -> dict:
    """Variants that do not exist, with the reason (reported, never silently dropped)."""
    reasons = {"opforge_torch out=": "opforge_torch registers no out= overload (torch.ops.opforge."
                                     f"{'swish' if op == 'Swish' else 'rms_norm'}.out)"}
    if op == "RMSNorm":
        reasons["F.rms_norm out="] = "torch has no out= variant of rms_norm"
    if available():
        reasons["opforge_torch"] = available()
    return reasons


def set_threads(n: int) -> None:
    torch.set_num_threads(n)


VARIANTS = {"Swish": swish_variants, "RMSNorm": rms_norm_variants}
