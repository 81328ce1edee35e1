"""What opforge_trt knows of the op spec, read from opforge-spec (a dependency of the package) when
it is imported, so no file of this package changes when an op is added: the domain and, per op in
spec order, its attributes (= the plugin's fields) with their defaults.
"""
from __future__ import annotations

from opforge_spec import DOMAIN
from opforge_spec import OPS as _SPEC

__all__ = ["ATTRIBUTES", "DOMAIN"]

# op -> its attributes (= TensorRT plugin fields), each (name, default)
ATTRIBUTES = {op.name: tuple((a.name, a.default) for a in op.attributes.values()) for op in _SPEC.values()}
