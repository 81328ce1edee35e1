"""What the runtimes are fed: the arrays of an .npz (keyed by input name), or generated ones -
standard normal floats (seeded), zeros for integers and booleans - with symbolic dimensions set
by --dim NAME=SIZE (default DEFAULT_DIM)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .errors import AlignError
from .model import np_dtype

DEFAULT_DIM = 2


def parse_dims(texts) -> dict:
    dims = {}
    for text in texts:
        name, _, size = text.partition("=")
        if not name or not size.isdigit():
            raise AlignError(f"--dim: expected NAME=SIZE (SIZE a non-negative integer), got {text!r}")
        dims[name] = int(size)
    return dims


def load_npz(path: Path) -> dict:
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except (OSError, ValueError) as err:
        raise AlignError(f"{path}: not a readable .npz ({type(err).__name__}: {err})") from None


def feeds(model, *, npz: Path | None = None, stored: dict | None = None, dims=None,
          seed: int = 0) -> dict:
    """One array per graph input: from `npz` (or `stored`, the arrays of a golden file), else
    generated."""
    given = load_npz(npz) if npz else (stored or {})
    rng = np.random.default_rng(seed)
    out = {}
    for info in model.inputs:
        dtype = np.dtype(np_dtype(info.type.tensor_type.elem_type))
        if npz and info.name not in given:
            raise AlignError(f"{npz}: input {info.name!r}: expected an array of that name, got "
                             f"keys {sorted(given)[:10]}")
        if info.name in given:
            out[info.name] = _checked(npz or "the stored outputs", info, given[info.name], dtype)
        else:
            out[info.name] = _generated(info, dtype, rng, dims or {})
    return out


def _checked(source, info, array, dtype) -> np.ndarray:
    array = np.asarray(array)
    declared = _declared_shape(info)
    if declared is not None and (len(declared) != array.ndim or any(
            d is not None and d != s for d, s in zip(declared, array.shape))):
        shown = ["?" if d is None else d for d in declared]
        raise AlignError(f"{source}: input {info.name!r}: expected shape {shown}, got "
                         f"{list(array.shape)}")
    return array.astype(dtype, copy=False)


def _declared_shape(info) -> list | None:
    tensor_type = info.type.tensor_type
    if not tensor_type.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else None for d in tensor_type.shape.dim]


def _generated(info, dtype, rng, dims: dict) -> np.ndarray:
    tensor_type = info.type.tensor_type
    if not tensor_type.HasField("shape"):
        raise AlignError(f"input {info.name!r} has no declared shape: give it with --inputs IN.npz")
    shape = [d.dim_value if d.HasField("dim_value") else dims.get(d.dim_param, DEFAULT_DIM)
             for d in tensor_type.shape.dim]
    if dtype.kind == "f" or dtype.name == "bfloat16":
        return rng.standard_normal(shape).astype(dtype)
    return np.zeros(shape, dtype)
