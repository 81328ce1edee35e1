"""The torch layer: composed ops vs torch.nn.functional's native op vs opforge_torch, each where
possible both allocating its output and writing into a preallocated one (out=).

Every variant of one op and size works on the same arrays (`inputs`): only X, W, one output and
one scratch buffer are alive besides the allocating variants' transient results."""
from __future__ import annotations

import torch
import torch.nn.functional as F

COLS = 4096  # RMSNorm row length and SwiGLU's d (a common hidden size)
EPS = 1e-6


def available() -> str:
    """"" if opforge_torch imports, else why not."""
    try:
        import opforge_torch  # noqa: F401
    except (ImportError, OSError) as err:  # not installed, or built for another torch
        return f"opforge_torch not importable: {err}"
    return ""


def has_out_overloads() -> bool:
    return not available() and hasattr(torch.ops.opforge.swish, "out")


def input_shape(op: str, n: int) -> tuple:
    """X's shape for about n input elements: Swish [n], RMSNorm [rows, COLS], SwiGLU [rows, 2*COLS]."""
    if op == "Swish":
        return (n,)
    cols = 2 * COLS if op == "SwiGLU" else COLS
    return (max(n // cols, 1), cols)


def output_shape(op: str, n: int) -> tuple:
    shape = input_shape(op, n)
    return (shape[0], COLS) if op == "SwiGLU" else shape


def inputs(op: str, n: int) -> dict:
    """The arrays every variant of (op, n) shares: x, w (RMSNorm), y (preallocated output), tmp."""
    x = torch.randn(*input_shape(op, n))
    y = torch.empty(*output_shape(op, n))
    return {"x": x, "y": y, "w": torch.rand(COLS) + 0.5, "tmp": torch.empty_like(y)}


def swish_variants(inp: dict) -> dict:
    """{name: (callable, allocating)}."""
    x, y, tmp = inp["x"], inp["y"], inp["tmp"]
    out = {
        "torch composed": (lambda: x * torch.sigmoid(x), True),
        "torch composed out=": (lambda: torch.mul(x, torch.sigmoid(x, out=tmp), out=y), False),
        "F.silu": (lambda: F.silu(x), True),
        "F.silu out=": (lambda: torch.ops.aten.silu.out(x, out=y), False),
    }
    if not available():
        out["opforge_torch"] = (lambda: torch.ops.opforge.swish(x, 1.0), True)
    if has_out_overloads():
        out["opforge_torch out="] = (lambda: torch.ops.opforge.swish.out(x, 1.0, out=y), False)
    return out


def rms_norm_variants(inp: dict) -> dict:
    x, w, y, sq = inp["x"], inp["w"], inp["y"], inp["tmp"]
    ms = torch.empty(x.shape[0], 1)

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
    if has_out_overloads():
        out["opforge_torch out="] = (lambda: torch.ops.opforge.rms_norm.out(x, w, EPS, out=y), False)
    return out


def swiglu_variants(inp: dict) -> dict:
    x, y, tmp = inp["x"], inp["y"], inp["tmp"]
    a, b = x.chunk(2, dim=-1)
    out = {
        "torch composed F.silu(a) * b": (lambda: F.silu(a) * b, True),
        "torch composed out=": (lambda: torch.mul(torch.ops.aten.silu.out(a, out=tmp), b, out=y), False),
    }
    if not available() and hasattr(torch.ops.opforge, "swiglu"):
        out["opforge_torch"] = (lambda: torch.ops.opforge.swiglu(x, 1.0), True)
        out["opforge_torch out="] = (lambda: torch.ops.opforge.swiglu.out(x, 1.0, out=y), False)
    return out


def memcpy(inp: dict):
    """copy_ of as many elements as the op's output holds (the bytes of one read + one write)."""
    dst = inp["y"].view(-1)
    src = inp["x"].view(-1)[: dst.numel()]
    return lambda: dst.copy_(src)


def not_measured(op: str) -> dict:
    """Variants that do not exist, with the reason (reported, never silently dropped)."""
    reasons = {}
    if op == "RMSNorm":
        reasons["F.rms_norm out="] = "torch has no out= variant of rms_norm"
    if op == "SwiGLU":
        reasons["a torch SwiGLU"] = "torch has no fused SwiGLU op (F.silu(a) * b is the composed form)"
    if available():
        reasons["opforge_torch"] = available()
    elif not has_out_overloads():
        reasons["opforge_torch out="] = "this opforge_torch build registers no .out overloads"
    return reasons


def set_threads(n: int) -> None:
    torch.set_num_threads(n)


VARIANTS = {"Swish": swish_variants, "RMSNorm": rms_norm_variants, "SwiGLU": swiglu_variants}
