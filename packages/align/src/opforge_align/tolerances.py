"""How far each tensor may lie from its expected value.

Every node has a budget of its own: an opforge op the op spec's tolerance for the dtype
(`opforge_spec`, the same bar every layer's tests use), and so does the standard ONNX op that
computes one (STANDARD_EQUIVALENTS: what an export's decomposed="auto" writes where the runtime has
it); any other standard op the per-dtype default below;
an op that only moves or selects values (EXACT_OPS) none. A tensor's budget adds its node's own to
the largest budget among the node's inputs in quadrature - rounding errors of a chain of ops grow
like a random walk, so a chain of n default ops gets sqrt(n) times the default. Graph inputs and
initializers are exact (every runtime is fed the same values). `--tolerance NAME=RTOL,ATOL` replaces
the budget of the tensors whose name matches NAME (a shell pattern), and downstream budgets grow
from the replaced value."""
from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass

import opforge_spec as spec

from .errors import AlignError

# (rtol, atol) of one standard op against the float64 reference, per dtype of its output. float32:
# 1e-5 is ~84 ulp at 1.0 - a correctly rounded op is within 0.5 ulp, ONNX Runtime's vectorized
# exp/tanh within a few, and the rest is headroom for ops that amplify their inputs' error
# (exp, division); float16/bfloat16: torch.testing's defaults; float64: the spec's float64 bar.
DEFAULTS = {"float64": (1e-12, 1e-15), "float32": (1e-5, 1e-6),
            "float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5)}

# ai.onnx ops that compute an opforge op by themselves (its OpSpec.standard): judged by that op's
# spec tolerance (RMSNormalization's row reduction may sum in another order than opforge's)
STANDARD_EQUIVALENTS = spec.standard_equivalents()

# Ops whose output holds input values unchanged: they add no error of their own.
EXACT_OPS = frozenset({
    "Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Concat", "Split",
    "Slice", "Gather", "GatherElements", "GatherND", "Expand", "Tile", "Pad", "Shape", "Size",
    "Relu", "Abs", "Neg", "Max", "Min", "MaxPool", "ReduceMax", "ReduceMin", "Where",
    "DepthToSpace", "SpaceToDepth", "Dropout", "ScatterElements", "ScatterND", "Sign",
    "Floor", "Ceil", "Round", "Not", "And", "Or", "Xor", "Equal", "Greater", "Less",
    "GreaterOrEqual", "LessOrEqual", "ArgMax", "ArgMin", "NonZero", "TopK", "ConstantOfShape",
    "Constant", "Range", "Trilu", "Compress", "OneHot", "Clip",
})


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float
    rule: str  # where it comes from, shown in the report

    def as_dict(self) -> dict:
        return {"rtol": self.rtol, "atol": self.atol, "rule": self.rule}


@dataclass(frozen=True)
class Override:
    pattern: str
    rtol: float
    atol: float

    @classmethod
    def parse(cls, text: str) -> Override:
        """`NAME=RTOL,ATOL` (NAME may be a shell pattern such as `/block1/*`)."""
        name, sep, values = text.rpartition("=")
        parts = values.split(",")
        try:
            rtol, atol = (float(p) for p in parts) if len(parts) == 2 else (None, None)
        except ValueError:
            rtol = atol = None
        if not sep or not name or rtol is None or atol is None or not all(
                math.isfinite(v) and v >= 0 for v in (rtol, atol)):
            raise AlignError(f"--tolerance: expected TENSOR=RTOL,ATOL with RTOL, ATOL finite and "
                             f">= 0, got {text!r}")
        return cls(name, rtol, atol)

    def matches(self, tensor: str) -> bool:
        return tensor == self.pattern or fnmatch.fnmatchcase(tensor, self.pattern)


def own_budget(op: str, dtype: str | None) -> tuple:
    """(rtol, atol) one node of `op` may add to a tensor of `dtype` (None: not floating)."""
    if dtype is None:
        return 0.0, 0.0
    domain, _, name = op.rpartition("::")
    if domain == spec.DOMAIN and name in spec.OPS:
        return spec.OPS[name].tolerance(dtype)
    if not domain and op in STANDARD_EQUIVALENTS:
        return spec.OPS[STANDARD_EQUIVALENTS[op]].tolerance(dtype)
    if not domain and op in EXACT_OPS:
        return 0.0, 0.0
    return DEFAULTS[dtype]


def budgets(model, dtypes: dict, overrides=()) -> dict:
    """tensor name -> Tolerance, for every tensor a node of the main graph computes."""
    producers = model.node_inputs()
    found: dict = {}
    for t in model.tensors:
        upstream = [found[i] for i in producers.get(t.name, ()) if i in found]
        up_rtol = max((u.rtol for u in upstream), default=0.0)
        up_atol = max((u.atol for u in upstream), default=0.0)
        own_rtol, own_atol = own_budget(t.op, dtypes.get(t.name))
        tolerance = Tolerance(math.hypot(own_rtol, up_rtol), math.hypot(own_atol, up_atol),
                              _rule(t.op, dtypes.get(t.name), up_rtol > 0))
        for override in overrides:  # the last matching one wins, as on a command line
            if override.matches(t.name):
                tolerance = Tolerance(override.rtol, override.atol,
                                      f"--tolerance {override.pattern}")
        found[t.name] = tolerance
    return found


def _rule(op: str, dtype: str | None, has_upstream: bool) -> str:
    if dtype is None:
        return "exact (not floating)"
    domain, _, name = op.rpartition("::")
    if domain == spec.DOMAIN and name in spec.OPS:
        own = f"{op} spec {dtype}"
    elif not domain and op in STANDARD_EQUIVALENTS:
        own = f"{op} as {spec.DOMAIN}::{STANDARD_EQUIVALENTS[op]} spec {dtype}"
    elif not domain and op in EXACT_OPS:
        own = "exact op"
    else:
        own = f"default {dtype}"
    return own + (" + upstream" if has_upstream else "")
