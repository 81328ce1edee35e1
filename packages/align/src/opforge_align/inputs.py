"""What the runtimes are fed: the arrays of an .npz (keyed by input name), or generated ones -
standard normal floats (seeded), zeros for integers and booleans - with symbolic dimensions set
by --dim NAME=SIZE (default DEFAULT_DIM).

Every input is planned before any memory is taken: its shape (declared or from the .npz header)
must fit the declaration, its dtype must be the model's or widen to it losslessly, and the inputs
together must fit the cap (--max-input-mib)."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import npz
from .errors import AlignError
from .model import np_dtype

DEFAULT_DIM = 2


def parse_dims(texts) -> dict:
    dims = {}
    for text in texts:
        name, _, size = text.partition("=")
        if not name or not re.fullmatch(r"[0-9]+", size):
            raise AlignError(f"--dim: expected NAME=SIZE (SIZE a non-negative integer), got {text!r}")
        dims[name] = int(size)
    return dims


def lossless(found: np.dtype, wanted: np.dtype) -> bool:
    """Whether every value of `found` is exactly a value of `wanted` (a real type never widens
    to a complex one here: the imaginary part would be made up)."""
    found, wanted = np.dtype(found), np.dtype(wanted)
    if found == wanted:
        return True
    if wanted.kind == "O":  # an ONNX string tensor
        return found.kind in "SU"
    if found.kind in "OSUV" and not _is_float(found):
        return False
    if not np.can_cast(found, wanted, "safe") or (wanted.kind == "c" and found.kind != "c"):
        return False
    if found.kind in "iu" and wanted.kind == "f":  # int64 -> float64 is "safe" to numpy, not exact
        return 8 * found.itemsize - (found.kind == "i") <= np.finfo(wanted).nmant + 1
    return True


@dataclass(frozen=True)
class _Plan:
    """One input before its bytes exist: its shape and dtypes, and where it comes from."""
    name: str
    shape: tuple
    found: np.dtype    # as given (the model's dtype when generated)
    wanted: np.dtype   # the model's
    source: str = ""   # the file it is read from; empty when generated

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * max(self.found.itemsize, self.wanted.itemsize)


def feeds(model, *, npz_path: Path | None = None, stored: dict | None = None, dims=None,
          seed: int = 0, max_bytes: int = npz.DEFAULT_MAX_MIB * npz.MIB,
          stored_source: str = "the stored outputs") -> tuple:
    """(one array per graph input, notes): from `npz_path` (or `stored`, arrays already read),
    else generated."""
    headers = npz.members(npz_path) if npz_path else {}
    given = stored or {}
    source = str(npz_path) if npz_path else stored_source
    plans, total, notes = [], 0, []
    for info in model.inputs:
        wanted = model_dtype(info)
        if npz_path and info.name not in headers:
            raise AlignError(f"{npz_path}: input {info.name!r}: expected an array of that name, "
                             f"got keys {sorted(headers)[:10]}")
        if npz_path or info.name in given:
            found = headers[info.name] if npz_path else np.asarray(given[info.name])
            plan = _Plan(info.name, tuple(found.shape), found.dtype, wanted, source)
            _check_shape(source, info, plan.shape)
            notes += _dtype_notes(plan)
        else:
            plan = _Plan(info.name, _generated_shape(info, dims or {}), wanted, wanted)
        total += plan.nbytes
        _check_size(plan, total, max_bytes)
        plans.append(plan)
    arrays = npz.load(npz_path, [p.name for p in plans]) if npz_path else given
    rng = np.random.default_rng(seed)
    out = {p.name: _made(p, arrays, rng) for p in plans}
    return out, notes


def stored_outputs(path: Path, model, *, max_bytes: int, with_inputs: bool = True) -> dict:
    """The arrays of a --load-outputs file that name a tensor of the model (and its inputs,
    `with_inputs`), each checked against the cap before it is read."""
    headers = npz.members(path)
    computed = {t.name for t in model.tensors}
    if not computed & set(headers):
        raise AlignError(f"{path}: holds none of the tensors {model.path} computes (expected "
                         f"e.g. {sorted(computed)[:3]}, got keys {sorted(headers)[:10]})")
    wanted = computed | ({i.name for i in model.inputs} if with_inputs else set())
    keys = [key for key in headers if key in wanted]
    for key in keys:
        npz.check_size(path, headers[key], max_bytes)
    return npz.load(path, keys)


def check_stored_dtypes(path: Path, stored: dict, model_dtypes: dict) -> list:
    """Notes on the stored tensors held in a wider dtype than the model's (float64 for float32:
    compared as stored); AlignError naming both dtypes for any other difference."""
    widened = []
    for name, dtype in model_dtypes.items():
        found = np.asarray(stored[name]).dtype if name in stored else dtype
        if found == dtype:
            continue
        if not _stored_fits(dtype, found):
            raise AlignError(f"{path}: tensor {name!r}: expected {dtype} (the model's dtype) or "
                             f"a dtype it widens to exactly, got {found}")
        widened.append(f"{name!r} {found} for {dtype}")
    if not widened:
        return []
    return [f"{path}: {len(widened)} stored tensor(s) in a wider dtype than the model's, "
            f"compared as stored (lossless): {', '.join(widened[:3])}"
            + (", ..." if len(widened) > 3 else "")]


def _stored_fits(model: np.dtype, stored: np.dtype) -> bool:
    if model.kind == "O":  # an ONNX string tensor
        return stored.kind in "SU"
    return lossless(model, stored)


def model_dtype(info) -> np.dtype:
    """The numpy dtype of a graph input, or AlignError for one that is not a tensor."""
    kind = info.type.WhichOneof("value")
    elem = info.type.tensor_type.elem_type if kind == "tensor_type" else 0
    try:
        if elem:
            return np.dtype(np_dtype(elem))
    except (KeyError, TypeError, ValueError):
        pass
    raise AlignError(f"input {info.name!r}: expected a tensor of a known element type, got "
                     f"{kind or 'no type'}{f' (element type {elem})' if elem else ''}")


def _check_shape(source, info, shape: tuple) -> None:
    declared = _declared_shape(info)
    if declared is not None and (len(declared) != len(shape) or any(
            d is not None and d != s for d, s in zip(declared, shape))):
        shown = ["?" if d is None else d for d in declared]
        raise AlignError(f"{source}: input {info.name!r}: expected shape {shown}, got "
                         f"{list(shape)}")


def _dtype_notes(plan: _Plan) -> list:
    if plan.found.newbyteorder("=") == plan.wanted:
        return []  # the same dtype in the other byte order: converted as it is read
    if plan.wanted.kind == "O" and plan.found.kind in "SU":
        return []  # an ONNX string tensor takes numpy's strings as they are
    if not lossless(plan.found, plan.wanted):
        raise AlignError(f"{plan.source}: input {plan.name!r}: expected {plan.wanted} (the model's "
                         f"dtype) or a dtype that widens to it exactly, got {plan.found}")
    return [f"input {plan.name!r}: {plan.found} data widened to the model's {plan.wanted} (lossless)"]


def _check_size(plan: _Plan, total: int, max_bytes: int) -> None:
    if total <= max_bytes:
        return
    where = f"{plan.source}: input {plan.name!r}" if plan.source else \
        f"input {plan.name!r} (generated)"
    together = f" ({npz.size_text(total)} with the inputs before it)" if total > plan.nbytes else ""
    raise AlignError(f"{where}: {list(plan.shape)} {plan.found} takes "
                     f"{npz.size_text(plan.nbytes)}{together}, over the cap of "
                     f"{npz.size_text(max_bytes)} for the inputs ({npz.LIMIT_FLAG} raises it)")


def _declared_shape(info) -> list | None:
    tensor_type = info.type.tensor_type
    if not tensor_type.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else None for d in tensor_type.shape.dim]


def _generated_shape(info, dims: dict) -> tuple:
    tensor_type = info.type.tensor_type
    if not tensor_type.HasField("shape"):
        raise AlignError(f"input {info.name!r} has no declared shape: give it with --inputs IN.npz")
    shape = tuple(d.dim_value if d.HasField("dim_value") else dims.get(d.dim_param, DEFAULT_DIM)
                  for d in tensor_type.shape.dim)
    if any(size < 0 for size in shape):
        raise AlignError(f"input {info.name!r}: declared shape {list(shape)}: expected sizes >= 0")
    return shape


def _made(plan: _Plan, arrays: dict, rng) -> np.ndarray:
    if plan.name in arrays:
        return np.asarray(arrays[plan.name]).astype(plan.wanted, copy=False)
    if _is_float(plan.wanted):
        return rng.standard_normal(plan.shape).astype(plan.wanted)
    if plan.wanted.kind == "O":  # an ONNX string tensor
        return np.full(plan.shape, "", dtype=object)
    return np.zeros(plan.shape, plan.wanted)


def _is_float(dtype: np.dtype) -> bool:
    """numpy's floats and ml_dtypes' (bfloat16, float8_*, ...: kind "V" to numpy)."""
    return dtype.kind == "f" or dtype.name.startswith(("bfloat16", "float8", "float6", "float4"))
