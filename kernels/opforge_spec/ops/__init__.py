"""The opforge operators, defined once, one module per op (opforge_spec/ops/<op>.py: names,
attributes, float64 references, tolerances and the input cases every layer is tested on) in the
op model of opforge_spec/model.py. OPS lists them in the order every generated table keeps."""
from __future__ import annotations

from ..model import OpSpec
from .add_rms_norm import ADD_RMS_NORM
from .geglu import GEGLU, GELU_CUBIC, SQRT_2_OVER_PI
from .rms_norm import RMS_NORM
from .swiglu import SWIGLU
from .swish import SWISH

__all__ = ["ADD_RMS_NORM", "GEGLU", "GELU_CUBIC", "OPS", "RMS_NORM", "SQRT_2_OVER_PI", "SWIGLU",
           "SWISH", "output_shape"]


def output_shape(op: OpSpec, shape) -> tuple:
    """Y's shape for X's shape (the gated ops halve the last axis; the others keep it)."""
    return op.output_shape(shape)


OPS = {op.name: op for op in (SWISH, RMS_NORM, SWIGLU, GEGLU, ADD_RMS_NORM)}
