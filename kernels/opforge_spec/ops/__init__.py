"""The opforge operators, defined once, one module per op (opforge_spec/ops/<op>.py: names,
attributes, float64 references, tolerances and the input cases every layer is tested on) in the
op model of opforge_spec/model.py. OPS holds every OpSpec these modules define, found by looking
(an op is its module: nothing lists it here), in the order every generated table keeps: by
(OpSpec.order, name)."""
from __future__ import annotations

import importlib
import pkgutil

from ..model import OpSpec
from .add_rms_norm import ADD_RMS_NORM
from .geglu import GEGLU, GELU_CUBIC, SQRT_2_OVER_PI
from .rms_norm import RMS_NORM
from .swiglu import SWIGLU
from .swish import SWISH

__all__ = ["ADD_RMS_NORM", "GEGLU", "GELU_CUBIC", "OPS", "RMS_NORM", "SQRT_2_OVER_PI", "SWIGLU",
           "SWISH", "output_shape", "standard_equivalents", "standard_forms"]


def output_shape(op: OpSpec, shape) -> tuple:
    """Y's shape for X's shape (the gated ops halve the last axis; the others keep it)."""
    return op.output_shape(shape)


def _defined_ops() -> list:
    """Every OpSpec of the modules of this package (one imported from another module counts once)."""
    found: dict = {}
    for module_info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{module_info.name}")
        for value in vars(module).values():
            if isinstance(value, OpSpec):
                if found.get(value.name, value) is not value:
                    raise ValueError(f"opforge_spec: two ops named {value.name!r} (the second in "
                                     f"opforge_spec/ops/{module_info.name}.py): expected unique names")
                found[value.name] = value
    return sorted(found.values(), key=lambda op: (op.order, op.name))


OPS = {op.name: op for op in _defined_ops()}


def standard_forms() -> dict:
    """op name -> its StandardForm, for the ops ONNX has as a standard op."""
    return {name: op.standard for name, op in OPS.items() if op.standard is not None}


def standard_equivalents() -> dict:
    """ai.onnx op type -> the opforge op it computes by itself (a form with no ops before it)."""
    return {form.op_type: name for name, form in standard_forms().items() if not form.after}
