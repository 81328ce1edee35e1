"""What the reference runtime refuses of an opforge node: what every layer refuses, by the op
spec's rules and in its words, in the order of ONNX Runtime's plugin - the node's inputs (their
count, none unnamed) and outputs (none beyond the spec's), its attributes (Attr.error), its outputs
(each of the spec's named: AddRMSNorm without H is refused), then its tensors: X's dtype and
shape (OpSpec.x_error), then each other input's dtype (R: X's; W: OpSpec.w_dtype_error, X's or
float32 beside a 16-bit X) and shape rule (R: OpSpec.r_error, W: OpSpec.w_error). A refusal names the node."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

import opforge_spec as spec

# X's dtypes: the spec's (the reference computes every one of them in float64)
FLOAT_TENSORS = "float64, float32, float16 or bfloat16 tensor"

# The shape rule of each input but X, by its role in OpSpec.inputs
SHAPE_RULES = {"R": spec.OpSpec.r_error, "W": spec.OpSpec.w_error}


class Refused(Exception):
    """An opforge node the spec refuses: the spec's message, the node named."""


@dataclass(frozen=True)
class Context:
    """What a run tells its opforge nodes: each tensor's dtype in the model (a float64 run widens
    the arrays, which then no longer show it), whether the arrays were widened, node labels."""
    dtypes: dict = field(default_factory=dict)  # tensor name -> its dtype's name in the model
    widened: bool = False
    labels: dict = field(default_factory=dict)  # output name -> its node's label (name or #index)

    def dtype(self, name: str, array) -> str | None:
        """The name of tensor `name`'s dtype in the model (`array`: its value in this run); None
        when unknown (a float64 array of a widened run may have been any float)."""
        if name in self.dtypes:
            return self.dtypes[name]
        found = np.asarray(array).dtype
        return None if self.widened and found == np.float64 else found.name

    def label(self, node) -> str:
        known = [self.labels[name] for name in node.output if name in self.labels]
        return known[0] if known else node.name or "(unnamed)"


def checked_attributes(op: spec.OpSpec, node, arrays: tuple, attrs: dict,
                       context: Context) -> dict:
    """The node's attribute values (defaults filled in) once every rule of the spec holds; else
    Refused with the first rule's message."""
    values = {name: attr.default if attrs.get(name) is None else float(attrs[name])
              for name, attr in op.attributes.items()}
    message = (_arity_error(op, node) or _attributes_error(op, values)
               or _outputs_error(op, node) or _tensors_error(op, node, arrays, context))
    if message:
        raise Refused(f'{message} (node "{context.label(node)}")')
    return values


def _arity_error(op: spec.OpSpec, node) -> str | None:
    """The node's inputs as the spec lists them, none unnamed; no output beyond the spec's."""
    inputs, outputs = list(node.input), list(node.output)
    if len(inputs) != len(op.inputs):
        return spec.error(op.name, "inputs", f"{len(op.inputs)} ({', '.join(op.inputs)})",
                          str(len(inputs)))
    unnamed = [role for role, name in zip(op.inputs, inputs) if not name]
    if unnamed:
        return spec.error(op.name, unnamed[0], "a named input (the node's inputs are "
                          f"{', '.join(op.inputs)})", "none")
    if len(outputs) > len(op.outputs):
        return spec.error(op.name, "outputs", f"{len(op.outputs)} ({', '.join(op.outputs)})",
                          str(len(outputs)))
    return None


def _attributes_error(op: spec.OpSpec, values: dict) -> str | None:
    errors = (attr.error(op.name, values[name]) for name, attr in op.attributes.items())
    return next((e for e in errors if e), None)


def _outputs_error(op: spec.OpSpec, node) -> str | None:
    """Each output of the spec named on the node (AddRMSNorm's H as well as Y)."""
    outputs = list(node.output)
    missing = [role for i, role in enumerate(op.outputs) if i >= len(outputs) or not outputs[i]]
    if not missing:
        return None
    return spec.error(op.name, missing[0], "a named output (the node's outputs are "
                      f"{', '.join(op.outputs)})", "none")


def _tensors_error(op: spec.OpSpec, node, arrays: tuple, context: Context) -> str | None:
    named = dict(zip(op.inputs, arrays))
    dtypes = {role: context.dtype(name, named[role]) for role, name in zip(op.inputs, node.input)}
    x_shape = np.shape(named["X"])
    message = _x_dtype_error(op, dtypes["X"]) or op.x_error(x_shape)
    for role in op.inputs[1:]:
        message = (message or _DTYPE_RULES[role](op, role, dtypes["X"], dtypes[role])
                   or SHAPE_RULES[role](op, x_shape, np.shape(named[role])))
    return message


def _x_dtype_error(op: spec.OpSpec, dtype: str | None) -> str | None:
    if dtype is None or dtype in spec.DTYPES:
        return None
    return spec.error(op.name, "X", FLOAT_TENSORS, f"{dtype} tensor")


def _same_dtype_error(op: spec.OpSpec, role: str, x_dtype: str | None,
                      dtype: str | None) -> str | None:
    if x_dtype is None or dtype is None or dtype == x_dtype:
        return None
    return spec.error(op.name, role, f"{x_dtype} tensor (same dtype as X)", f"{dtype} tensor")


def _w_dtype_error(op: spec.OpSpec, role: str, x_dtype: str | None, dtype: str | None) -> str | None:
    """W's rule (opforge_spec.weight_dtypes): X's dtype, or float32 beside a 16-bit X (a mixed-dtype
    node, which the reference computes with W as given)."""
    if x_dtype is None or dtype is None:
        return None
    return op.w_dtype_error(x_dtype, dtype)


# The dtype rule of each input but X, by its role: R keeps X's dtype, W follows the spec's rule
_DTYPE_RULES = {"R": _same_dtype_error, "W": _w_dtype_error}
