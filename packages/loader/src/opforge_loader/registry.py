"""Python API over libopforge_loader.so.1."""
from __future__ import annotations

import ctypes as C
import functools
import logging
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from . import _capi, manifests
from .errors import OpforgeError
from .isolation import Candidate

_logger = logging.getLogger("opforge_loader")

_NUMPY_DTYPES: dict[np.dtype, int] = {np.dtype(np.float32): 1, np.dtype(np.int8): 3, np.dtype(np.int32): 6, np.dtype(np.int64): 7,
                 np.dtype(np.float16): 10, np.dtype(np.float64): 11}
try:  # numpy has no bfloat16 or float8; ml_dtypes (optional, `opforge-loader[bf16]`) provides them
    import ml_dtypes

    _NUMPY_DTYPES[np.dtype(ml_dtypes.bfloat16)] = 16
    _NUMPY_DTYPES[np.dtype(ml_dtypes.float8_e4m3fn)] = 17
except ImportError:
    pass
_CODE_TO_NUMPY = {v: k for k, v in _NUMPY_DTYPES.items()}


def _raise_on(status: int, err) -> None:
    if status != _capi.OK:
        raise OpforgeError(err.value.decode(errors="replace"), status)


def _text(b: bytes | None) -> str:
    return b.decode(errors="replace") if b else ""


@dataclass(frozen=True)
class IOInfo:
    name: str
    dtypes: tuple[str, ...]


@dataclass(frozen=True)
class AttrInfo:
    name: str
    type: str
    required: bool
    default: object
    doc: str


@dataclass(frozen=True)
class OpInfo:
    plugin: str
    plugin_version: str
    library: str
    kind: str
    domain: str
    name: str
    version_major: int
    version_minor: int
    description: str
    state: str
    refs: int
    inputs: tuple[IOInfo, ...] = field(default_factory=tuple)
    outputs: tuple[IOInfo, ...] = field(default_factory=tuple)
    attrs: tuple[AttrInfo, ...] = field(default_factory=tuple)

    @property
    def version(self) -> str:
        return f"{self.version_major}.{self.version_minor}"


def _io(descs, n) -> tuple[IOInfo, ...]:
    return tuple(IOInfo(_text(descs[i].name),
                        tuple(_capi.DTYPE_NAMES.get(descs[i].dtypes[k], str(descs[i].dtypes[k]))
                              for k in range(descs[i].num_dtypes)))
                 for i in range(n))


def _attrs(schema, n) -> tuple[AttrInfo, ...]:
    out = []
    for i in range(n):
        s = schema[i]
        kind = {1: "float", 2: "int", 3: "string"}.get(s.type, "?")
        default = {1: s.default_float, 2: s.default_int, 3: _text(s.default_string)}.get(s.type)
        out.append(AttrInfo(_text(s.name), kind, bool(s.required), default, _text(s.doc)))
    return tuple(out)


def _info_from(c: _capi.OpInfo) -> OpInfo:
    d = c.def_.contents
    return OpInfo(plugin=_text(c.plugin), plugin_version=_text(c.plugin_version), library=_text(c.library),
                  kind=_text(c.kind), domain=_text(c.domain), name=_text(c.name),
                  version_major=c.version_major, version_minor=c.version_minor,
                  description=_text(c.description), state=_capi.STATE_NAMES[c.state], refs=c.refs,
                  inputs=_io(d.inputs, d.num_inputs), outputs=_io(d.outputs, d.num_outputs),
                  attrs=_attrs(d.attrs, d.num_attrs))


def _as_tensor(a: np.ndarray, keep: list) -> _capi.Tensor:
    code = _NUMPY_DTYPES.get(a.dtype)
    if code is None:
        code = -1  # the host names the op, the input and what it expected
    shape = (C.c_int64 * max(a.ndim, 1))(*a.shape)
    keep.append(shape)
    return _capi.Tensor(code, a.ndim, shape, a.ctypes.data if a.size else None)


class Op:
    """An acquired op: its library stays loaded (even across reload/unload) until released."""

    def __init__(self, registry: Registry, ref: C.c_void_p):
        self._lib = registry._lib
        self._ref: C.c_void_p | None = ref

    @functools.cached_property
    def _def(self) -> _capi.OpDef:
        return self._lib.opforge_ref_def(self._ref).contents

    @functools.cached_property
    def name(self) -> str:
        return _text(self._def.name)

    @functools.cached_property
    def domain(self) -> str:
        return _text(self._def.domain)

    @property
    def version_major(self) -> int:
        return self._def.version_major

    @property
    def version_minor(self) -> int:
        return self._def.version_minor

    @functools.cached_property
    def plugin_version(self) -> str:
        return _text(self._lib.opforge_ref_plugin_version(self._ref))

    @functools.cached_property
    def _attr_types(self) -> dict[str, int]:
        d = self._def
        return {_text(d.attrs[i].name): d.attrs[i].type for i in range(d.num_attrs)}

    def _attr_values(self, attrs: Mapping[str, Any]) -> C.Array:
        values = (_capi.AttrValue * max(len(attrs), 1))()
        for slot, (name, value) in zip(values, attrs.items()):
            slot.name = name.encode()
            want = self._attr_types.get(name, 0)
            if isinstance(value, str):
                slot.type, slot.s = _capi.ATTR_STRING, value.encode()
            elif isinstance(value, (int, np.integer)) and not isinstance(value, bool) and want != _capi.ATTR_FLOAT:
                slot.type, slot.i = _capi.ATTR_INT, int(value)
            else:
                slot.type, slot.f = _capi.ATTR_FLOAT, float(value)
        return values

    def run(self, *inputs: np.ndarray, **attrs) -> np.ndarray | tuple[np.ndarray, ...]:
        """Run once on CPU numpy arrays; returns one array (or a tuple for several outputs)."""
        if self._ref is None:
            raise OpforgeError("opforge-loader: op handle was used after release")
        err = _capi.err_buffer()
        arrays = [np.require(a, requirements="C") for a in inputs]  # keeps rank 0 (ascontiguousarray does not)
        keep: list = []
        tin = (_capi.Tensor * max(len(arrays), 1))(*[_as_tensor(a, keep) for a in arrays])
        values = self._attr_values(attrs)
        inst = C.c_void_p()
        _raise_on(self._lib.opforge_op_create(self._ref, values, len(attrs), C.byref(inst), err, len(err)), err)
        try:
            descs = (_capi.TensorDesc * self._def.num_outputs)()
            _raise_on(self._lib.opforge_op_output_shapes(self._ref, inst, tin, len(arrays), descs,
                                                         self._def.num_outputs, err, len(err)), err)
            outs = [np.empty(tuple(d.shape[:d.rank]), dtype=self._numpy_dtype(i, d.dtype)) for i, d in enumerate(descs)]
            tout = (_capi.Tensor * self._def.num_outputs)(*[_as_tensor(o, keep) for o in outs])
            _raise_on(self._lib.opforge_op_compute(self._ref, inst, tin, len(arrays), tout,
                                                   self._def.num_outputs, err, len(err)), err)
        finally:
            self._lib.opforge_op_destroy(self._ref, inst)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _numpy_dtype(self, index: int, code: int) -> np.dtype:
        """The numpy dtype of output `index` (code: OpforgeDType); float8 and bfloat16 need ml_dtypes."""
        if code in _CODE_TO_NUMPY:
            return _CODE_TO_NUMPY[code]
        name = _capi.DTYPE_NAMES.get(code, f"dtype code {code}")
        raise OpforgeError(f"opforge-loader: {self.name} output {index}: its dtype {name} has no numpy "
                           "dtype here: install ml_dtypes (pip install 'opforge-loader[bf16]')")

    def release(self) -> None:
        if self._ref is not None:
            self._lib.opforge_release(self._ref)
            self._ref = None

    def __del__(self):
        try:
            self.release()
        except Exception:  # noqa: BLE001  (interpreter shutdown: whatever __del__ meets is dropped)
            pass


class Registry:
    """A plugin registry. `Registry(dir)` loads every kind=opforge plugin found under dir.

    admit(candidates) is asked before any code of the libraries runs, up to 64 at a time (a
    list of isolation.Candidate: the real file, the sealed memfd holding exactly the bytes that
    were hashed and will be mapped, the $ORIGIN dependencies loaded first); it returns one answer
    per candidate: None lets the load go on, a string refuses the library with that reason
    (isolation.admit_in_child runs them in a child process first)."""

    def __init__(self, directory: str | os.PathLike | None = None, *,
                 log: Callable[[int, str], None] | None = None,
                 admit: Callable[[list[Candidate]], Sequence[str | None]] | None = None):
        self._lib = _capi.lib()
        self._ptr = self._lib.opforge_registry_create()
        if not self._ptr:
            raise OpforgeError("opforge-loader: cannot create a registry (out of memory)")
        self._user_log = log
        self.refusals: list[str] = []
        self._lock = threading.Lock()
        self._log_cb = _capi.LogFn(self._on_log)  # kept alive as long as the registry
        self._lib.opforge_registry_set_log(self._ptr, self._log_cb, None)
        self._admit = admit
        self._admit_cb = _capi.AdmitFn(self._on_admit)
        if admit is not None:
            self._lib.opforge_registry_set_admit(self._ptr, self._admit_cb, None)
        if directory is not None:
            self.load_dir(directory)

    def _on_log(self, _user, level: int, line: bytes) -> None:
        text = _text(line)
        if text.startswith("opforge-loader refuse "):
            with self._lock:
                self.refusals.append(text)
        if self._user_log is not None:
            self._user_log(level, text)
        else:
            _logger.log(level, text)

    def _on_admit(self, _user, batch, count: int) -> None:
        asks = [batch[i] for i in range(count)]
        candidates = [Candidate(os.fsdecode(a.library_path), a.image_fd,
                                tuple(os.fsdecode(a.dependencies[k]) for k in range(a.num_dependencies)))
                      for a in asks]
        try:
            assert self._admit is not None  # the callback is set only with an admit function
            reasons = list(self._admit(candidates))
            if len(reasons) != count:
                raise ValueError(f"expected {count} answers, got {len(reasons)}")
        except Exception as e:  # noqa: BLE001  (any exception: none may cross back into C)
            reasons = [f"the admit callback raised {type(e).__name__}: {e}"] * count
        for ask, reason in zip(asks, reasons):
            ask.status = _capi.OK if reason is None else _capi.REFUSED
            if reason is not None and ask.err_len > 0:
                text = (reason or "refused by the admit callback").encode(errors="replace")[:ask.err_len - 1]
                C.memmove(ask.err, text + b"\0", len(text) + 1)

    def _call(self, fn, *args) -> None:
        err = _capi.err_buffer()
        _raise_on(fn(self._ptr, *args, err, len(err)), err)

    def load(self, library: str | os.PathLike) -> None:
        """Load one library (its <file>.manifest.json beside it); raises OpforgeError when refused."""
        self._call(self._lib.opforge_registry_load, os.fsencode(library))

    def load_dir(self, directory: str | os.PathLike) -> tuple[int, int]:
        """Load all opforge plugins under directory (sorted, recursive). Returns (loaded, refused);
        the reasons of refusals are in self.refusals and the log."""
        loaded, refused = C.c_uint32(), C.c_uint32()
        self._call(self._lib.opforge_registry_load_dir, os.fsencode(directory), C.byref(loaded), C.byref(refused))
        return loaded.value, refused.value

    def unload(self, plugin: str) -> None:
        """Unregister a plugin; its library is closed once the last acquired op is released."""
        self._call(self._lib.opforge_registry_unload, plugin.encode())

    def reload(self, library: str | os.PathLike) -> None:
        """Hot-swap the plugin of the same name to `library`; callers holding ops keep the old one."""
        self._call(self._lib.opforge_registry_reload, os.fsencode(library))

    def sync(self, directory: str | os.PathLike) -> int:
        """One watch step over directory; returns the number of loads/reloads/unloads done."""
        changes = C.c_uint32()
        self._call(self._lib.opforge_registry_sync_dir, os.fsencode(directory), C.byref(changes))
        return changes.value

    def ops(self) -> list[OpInfo]:
        found: list[OpInfo] = []
        visit = _capi.VisitFn(lambda _u, info: found.append(_info_from(info.contents)))
        self._lib.opforge_registry_enumerate(self._ptr, visit, None)
        return sorted(found, key=lambda o: (o.plugin, o.name, o.version_major))

    def plugins(self) -> list[str]:
        return sorted({o.plugin for o in self.ops()})

    def acquire_op(self, op: str, version: int = 0) -> Op:
        """Acquire without a context manager; call .release() when done."""
        err = _capi.err_buffer()
        ref = C.c_void_p()
        _raise_on(self._lib.opforge_acquire(self._ptr, op.encode(), version, C.byref(ref), err, len(err)), err)
        return Op(self, ref)

    @contextmanager
    def acquire(self, op: str, version: int = 0) -> Iterator[Op]:
        """`with reg.acquire("Swish") as swish: swish.run(x, beta=1.0)`; version 0 = newest major."""
        handle = self.acquire_op(op, version)
        try:
            yield handle
        finally:
            handle.release()

    def run(self, op: str, inputs: Sequence[np.ndarray], attrs: Mapping[str, object] | None = None,
            version: int = 0):
        with self.acquire(op, version) as handle:
            return handle.run(*inputs, **(attrs or {}))

    def close(self) -> None:
        if self._ptr:
            # Libraries still held by Op objects log their dlclose later: not through this object.
            self._lib.opforge_registry_set_log(self._ptr, _capi.LogFn(), None)
            self._lib.opforge_registry_destroy(self._ptr)
            self._ptr = None

    def __enter__(self) -> Registry:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001  (interpreter shutdown: whatever __del__ meets is dropped)
            pass


def check_manifest(manifest: str | os.PathLike, runtime_version: str | None = None) -> None:
    """Validate a manifest (schema, sha256, permissions, version ranges) without loading anything."""
    manifests.load(manifest)  # bounded read of a regular file and the shape; the host checks the rest
    err = _capi.err_buffer()
    rv = runtime_version.encode() if runtime_version else None
    _raise_on(_capi.lib().opforge_manifest_check(os.fsencode(manifest), rv, err, len(err)), err)
