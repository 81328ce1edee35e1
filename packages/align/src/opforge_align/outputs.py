"""An op's outputs as the spec names them: the spec's forms (reference, composed, independent)
return a bare array for an op with one output and a tuple for an op with several (AddRMSNorm's
Y and H); every comparison here takes them as a tuple, one array per name of `op.outputs`."""
from __future__ import annotations

import opforge_spec as spec

# Between a stored name and an output's name in files holding several outputs (case "random",
# output H: "random@H"); "@" is in no case or output name of the spec.
SEPARATOR = "@"


def as_tuple(op: spec.OpSpec, value) -> tuple:
    """`value` (what one of the op's forms returned) as a tuple of its outputs, in spec order; a
    lone array where several were due stays one (never its rows): the caller counts them."""
    if len(op.outputs) > 1 and isinstance(value, (tuple, list)):
        return tuple(value)
    return (value,)


def from_tuple(op: spec.OpSpec, values) -> object:
    """The inverse of `as_tuple`: a bare array for a single-output op."""
    values = tuple(values)
    return values if len(op.outputs) > 1 else values[0]


def keys(op: spec.OpSpec, base: str) -> list:
    """The keys `base` is stored under: itself for one output, `base@<output>` for each of several."""
    if len(op.outputs) == 1:
        return [base]
    return [f"{base}{SEPARATOR}{name}" for name in op.outputs]


def pack(op: spec.OpSpec, base: str, value) -> dict:
    """{key: array} of `value`'s outputs, under `keys(op, base)`."""
    return dict(zip(keys(op, base), as_tuple(op, value)))


def unpack(op: spec.OpSpec, stored, base: str) -> object:
    """What `pack` stored under `base` (stored: a dict or an npz), as the op's forms return it."""
    return from_tuple(op, (stored[key] for key in keys(op, base)))


def bases(op: spec.OpSpec, stored_keys) -> list:
    """The distinct bases of `stored_keys`, in order (each case of an outputs file)."""
    if len(op.outputs) == 1:
        return list(stored_keys)
    return list(dict.fromkeys(key.rpartition(SEPARATOR)[0] or key for key in stored_keys))


def role(node, index: int) -> str:
    """Which output of an ONNX node a tensor is, for the report: "" for a node of one output;
    the spec's name (AddRMSNorm's Y, H) for an opforge op of several, else "#<index>"."""
    if len(node.output) == 1:
        return ""
    op = spec.OPS.get(node.op_type) if node.domain == spec.DOMAIN else None
    return op.outputs[index] if op is not None and index < len(op.outputs) else f"#{index}"
