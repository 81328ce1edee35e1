"""The torch layer: composed ops vs torch.nn.functional's native op vs opforge_torch, each where
possible both allocating its output and writing into a preallocated one (out=).

Every variant of one op and size works on the same arrays (`inputs`): only X, W, one output and
one scratch buffer are alive besides the allocating variants' transient results."""
from __future__ import annotations

import torch
import torch.nn.functional as F

import opforge_spec

COLS = 4096  # a row op's row length, a split op's part (a common hidden size)
EPS = opforge_spec.RMS_NORM.defaults()["epsilon"]  # the norms' default (AddRMSNorm's too)


def available() -> str:
    """"" if opforge_torch imports, else why not."""
    try:
        import opforge_torch  # noqa: F401
    except (ImportError, OSError) as err:  # not installed, or built for another torch
        return f"opforge_torch not importable: {err}"
    return ""


def has_out_overloads() -> bool:
    """Whether this opforge_torch build registers .out overloads (every op or none: the schemas
    are generated; the spec's first op is asked)."""
    first = next(iter(opforge_spec.OPS.values()))
    return not available() and hasattr(getattr(torch.ops.opforge, first.torch_name), "out")


def input_shape(op: str, n: int) -> tuple:
    """X's shape for about n input elements by the spec's shape rule: an elementwise op [n], a row
    op [rows, COLS], an op splitting the last axis in k parts [rows, k*COLS]."""
    spec = opforge_spec.OPS[op]
    if spec.layout == "elementwise":
        return (n,)
    cols = spec.split * COLS
    return (max(n // cols, 1), cols)


def output_shape(op: str, n: int) -> tuple:
    return opforge_spec.OPS[op].output_shape(input_shape(op, n))


def inputs(op: str, n: int) -> dict:
    """The arrays every variant of (op, n) shares: x, w (a per-column weight), r (a residual of
    X's shape), y (preallocated output), h (a second output of X's shape), tmp; r and h only
    for an op that has them."""
    spec = opforge_spec.OPS[op]
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(*input_shape(op, n), generator=gen)
    y = torch.empty(*output_shape(op, n))
    out = {"x": x, "y": y, "w": torch.rand(COLS, generator=gen) + 0.5, "tmp": torch.empty_like(y)}
    if "R" in spec.inputs:
        out["r"] = torch.randn(x.shape, generator=gen)
    if len(spec.outputs) > 1:
        out["h"] = torch.empty_like(x)
    out.update(own_outputs(spec, x))
    return out


def own_outputs(spec: opforge_spec.OpSpec, x) -> dict:
    """Preallocated outputs of their own dtype or shape (RMSNormQuant's Q int8 and Scale float32
    [rows, 1], the attributes' defaults), under their OUTPUT_KEYS."""
    return {OUTPUT_KEYS[name]: torch.empty(spec.output_shape_of(name, x.shape),
                                      dtype=getattr(torch, spec.output_dtype(name, "float32")))
            for name in spec.outputs if name not in ("Y", "H")}


# The shared arrays by the spec's names of an op's inputs and outputs.
INPUT_KEYS = {"X": "x", "R": "r", "W": "w"}
OUTPUT_KEYS = {"Y": "y", "H": "h"}
# Outputs of their own dtype or shape (RMSNormQuant's Q, Scale): their lowercased names (own_outputs).
OUTPUT_KEYS.update({name: name.lower() for spec in opforge_spec.OPS.values() for name in spec.outputs
                    if name not in OUTPUT_KEYS})


def swish_variants(inp: dict) -> dict:
    """{name: (callable, allocating)}."""
    x, y, tmp = inp["x"], inp["y"], inp["tmp"]
    out = {
        "torch composed": (lambda: x * torch.sigmoid(x), True),
        "torch composed out=": (lambda: torch.mul(x, torch.sigmoid(x, out=tmp), out=y), False),
        "F.silu": (lambda: F.silu(x), True),
        "F.silu out=": (lambda: torch.ops.aten.silu.out(x, out=y), False),
    }
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
    return out


def swiglu_variants(inp: dict) -> dict:
    x, y, tmp = inp["x"], inp["y"], inp["tmp"]
    a, b = x.chunk(2, dim=-1)
    out = {
        "torch composed F.silu(a) * b": (lambda: F.silu(a) * b, True),
        "torch composed out=": (lambda: torch.mul(torch.ops.aten.silu.out(a, out=tmp), b, out=y), False),
    }
    return out


def add_rms_norm_variants(inp: dict) -> dict:
    """The residual add, then RMSNorm, as a decoder writes it without a fused op: the spec's
    composed RMSNorm, opforge's own rms_norm, torch's F.rms_norm (where this torch has it)."""
    x, r, w, y, h = inp["x"], inp["r"], inp["w"], inp["y"], inp["h"]
    composed = opforge_spec.ADD_RMS_NORM.composed  # x + r, then the spec's composed RMSNorm
    assert composed is not None
    out = {"torch composed x + r, RMSNorm": (lambda: composed(x, r, w, EPS), True)}
    if not available():
        rms_norm = torch.ops.opforge.rms_norm
        out["x + r, opforge rms_norm"] = (lambda: rms_norm(x + r, w, EPS), True)
        if has_out_overloads():
            out["x + r, opforge rms_norm out="] = (
                lambda: rms_norm.out(torch.add(x, r, out=h), w, EPS, out=y), False)
    if hasattr(F, "rms_norm"):
        out["x + r, F.rms_norm"] = (lambda: F.rms_norm(x + r, (COLS,), w, EPS), True)
    return out


def memcpy(inp: dict):
    """copy_ of as many elements as the op's output holds (the bytes of one read + one write)."""
    dst = inp["y"].view(-1)
    src = inp["x"].view(-1)[: dst.numel()]
    return lambda: dst.copy_(src)


def not_measured(op: str) -> dict:
    """Variants that do not exist, with the reason (reported, never silently dropped): torch's
    forms missing beside an op's COMPETITORS, and opforge_torch's where it does not import."""
    reasons = dict(ABSENT[op]()) if op in ABSENT else {}
    if available():
        reasons["opforge_torch"] = available()
    elif not has_out_overloads():
        reasons["opforge_torch out="] = "this opforge_torch build registers no .out overloads"
    return reasons


def set_threads(n: int) -> None:
    torch.set_num_threads(n)


# torch's own forms of an op beside its composed form (what opforge_torch competes with).
COMPETITORS = {"Swish": swish_variants, "RMSNorm": rms_norm_variants, "SwiGLU": swiglu_variants,
               "AddRMSNorm": add_rms_norm_variants}


def _no_f_rms_norm() -> dict:
    return {} if hasattr(F, "rms_norm") else {
        "x + r, F.rms_norm": f"torch {torch.__version__} has no F.rms_norm"}


# The torch forms a reader of an op's COMPETITORS looks for that torch lacks: variant -> why.
ABSENT = {
    "RMSNorm": lambda: {"F.rms_norm out=": "torch has no out= variant of rms_norm"},
    "SwiGLU": lambda: {"a torch SwiGLU": "torch has no fused SwiGLU op (F.silu(a) * b is the "
                                         "composed form)"},
    "AddRMSNorm": lambda: {"a torch add + RMSNorm": "torch has no fused residual add + RMSNorm op",
                           **_no_f_rms_norm()},
}


def _tensors(spec: opforge_spec.OpSpec, inp: dict) -> tuple:
    return tuple(inp[INPUT_KEYS[name]] for name in spec.inputs)


def _out_arguments(spec: opforge_spec.OpSpec, inp: dict) -> dict:
    """The .out overload's keywords: `out` for one output, `<output>_out` for each of several
    (the generated schemas' convention)."""
    if len(spec.outputs) == 1:
        return {"out": inp["y"]}
    return {f"{name.lower()}_out": inp[OUTPUT_KEYS[name]] for name in spec.outputs}


def opforge_variants(op: str, inp: dict) -> dict:
    """opforge_torch's op (the spec's attribute defaults) and its .out overload, for every op."""
    spec = opforge_spec.OPS[op]
    tensors, attrs = _tensors(spec, inp), tuple(spec.defaults().values())
    if available() or not hasattr(torch.ops.opforge, spec.torch_name):
        return {}
    fused, outs = getattr(torch.ops.opforge, spec.torch_name), _out_arguments(spec, inp)
    out = {"opforge_torch": (lambda: fused(*tensors, *attrs), True)}
    if has_out_overloads():
        out["opforge_torch out="] = (lambda: fused.out(*tensors, *attrs, **outs), False)
    return out


def variants(op: str, inp: dict) -> dict:
    """{name: (callable, allocating)}: torch's forms (the spec's composed form where no others are
    listed), then opforge_torch's."""
    spec = opforge_spec.OPS[op]
    tensors = _tensors(spec, inp)
    composed = spec.composed
    assert composed is not None  # every op of the spec has a composed form
    theirs = COMPETITORS[op](inp) if op in COMPETITORS else {
        "torch composed": (lambda: composed(*tensors), True)}
    return {**theirs, **opforge_variants(op, inp)}


VARIANTS = {op: (lambda inp, op=op: variants(op, inp)) for op in opforge_spec.OPS}
