"""What opforge_ort knows of the op spec, read from opforge-spec (a dependency of the package) when
it is imported, so no file of this package changes when an op is added: the domain, its version,
the op names in spec order and, per op, its attributes and its outputs' dtype rules.
"""
from __future__ import annotations

from opforge_spec import DOMAIN, DOMAIN_VERSION
from opforge_spec import OPS as _SPEC

__all__ = ["ATTRIBUTES", "DOMAIN", "DOMAIN_VERSION", "ENUM_CHOICES", "OPS", "OUTPUTS"]

OPS = tuple(_SPEC)
# op -> its attributes, each (name, default)
ATTRIBUTES = {op.name: tuple((a.name, a.default) for a in op.attributes.values()) for op in _SPEC.values()}
# op -> its enum attributes' values, name -> value (a dtype enum: ONNX TensorProto codes)
ENUM_CHOICES = {op.name: {a.name: dict(a.choices) for a in op.attributes.values() if a.choices}
                for op in _SPEC.values()}
# op -> each output (name, dtype: X (X's), a dtype name or the enum attribute picking it,
# shape: split (the op's rule), x (X's) or row (X's, last dim 1))
OUTPUTS = {op.name: tuple((o, op.output_dtypes.get(o, "X"), op.shape_rule(o)) for o in op.outputs)
           for op in _SPEC.values()}
