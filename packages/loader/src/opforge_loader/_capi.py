"""ctypes mirror of include/opforge/plugin.h and include/opforge/loader.h."""
from __future__ import annotations

import ctypes as C
import functools
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
LIBRARY_FILE = "libopforge_loader.so.1"

OK = 0
REFUSED = 6
REENTRANT = 8
STATUS_NAMES = {0: "OK", 1: "INVALID_ARGUMENT", 2: "UNSUPPORTED", 3: "OUT_OF_MEMORY", 4: "INTERNAL",
                5: "NOT_FOUND", 6: "REFUSED", 7: "INIT_FAILED", 8: "REENTRANT"}
STATE_NAMES = ("Loaded", "Registered", "Initializing", "Running", "Unregistering")
ATTR_FLOAT, ATTR_INT, ATTR_STRING = 1, 2, 3
DTYPE_NAMES = {1: "float32", 3: "int8", 6: "int32", 7: "int64", 10: "float16", 11: "float64", 16: "bfloat16",
               17: "float8_e4m3fn"}
MAX_RANK = 8


class Tensor(C.Structure):
    _fields_ = [("dtype", C.c_int32), ("rank", C.c_int32), ("shape", C.POINTER(C.c_int64)), ("data", C.c_void_p)]


class TensorDesc(C.Structure):
    _fields_ = [("dtype", C.c_int32), ("rank", C.c_int32), ("shape", C.c_int64 * MAX_RANK)]


class IODesc(C.Structure):
    _fields_ = [("name", C.c_char_p), ("num_dtypes", C.c_uint32), ("dtypes", C.POINTER(C.c_int32))]


class AttrSchema(C.Structure):
    _fields_ = [("name", C.c_char_p), ("type", C.c_int32), ("required", C.c_int32), ("default_float", C.c_double),
                ("default_int", C.c_int64), ("default_string", C.c_char_p), ("doc", C.c_char_p)]


class AttrValue(C.Structure):
    _fields_ = [("name", C.c_char_p), ("type", C.c_int32), ("f", C.c_double), ("i", C.c_int64), ("s", C.c_char_p)]


class OpDef(C.Structure):
    _fields_ = [("domain", C.c_char_p), ("name", C.c_char_p), ("version_major", C.c_uint32),
                ("version_minor", C.c_uint32), ("description", C.c_char_p),
                ("num_inputs", C.c_uint32), ("inputs", C.POINTER(IODesc)),
                ("num_outputs", C.c_uint32), ("outputs", C.POINTER(IODesc)),
                ("num_attrs", C.c_uint32), ("attrs", C.POINTER(AttrSchema)),
                ("create", C.c_void_p), ("destroy", C.c_void_p), ("output_shapes", C.c_void_p),
                ("compute", C.c_void_p)]


class OpInfo(C.Structure):
    _fields_ = [("plugin", C.c_char_p), ("plugin_version", C.c_char_p), ("library", C.c_char_p),
                ("kind", C.c_char_p), ("domain", C.c_char_p), ("name", C.c_char_p),
                ("version_major", C.c_uint32), ("version_minor", C.c_uint32), ("description", C.c_char_p),
                ("state", C.c_int32), ("refs", C.c_int64), ("num_inputs", C.c_uint32),
                ("num_outputs", C.c_uint32), ("num_attrs", C.c_uint32), ("def_", C.POINTER(OpDef))]


class Admission(C.Structure):
    _fields_ = [("library_path", C.c_char_p), ("image_fd", C.c_int), ("num_dependencies", C.c_uint32),
                ("dependencies", C.POINTER(C.c_char_p)), ("status", C.c_int32), ("err", C.c_void_p),
                ("err_len", C.c_size_t)]


LogFn = C.CFUNCTYPE(None, C.c_void_p, C.c_int32, C.c_char_p)
VisitFn = C.CFUNCTYPE(None, C.c_void_p, C.POINTER(OpInfo))
AdmitFn = C.CFUNCTYPE(None, C.c_void_p, C.POINTER(Admission), C.c_uint32)

_P = C.c_void_p
_ERR = [C.c_char_p, C.c_size_t]
_SIGNATURES = {
    "opforge_loader_version": (C.c_char_p, []),
    "opforge_loader_api_version": (C.c_uint32, []),
    "opforge_registry_create": (_P, []),
    "opforge_registry_destroy": (None, [_P]),
    "opforge_registry_set_log": (None, [_P, LogFn, _P]),
    "opforge_registry_set_admit": (None, [_P, AdmitFn, _P]),
    "opforge_registry_load": (C.c_int32, [_P, C.c_char_p] + _ERR),
    "opforge_registry_load_dir": (C.c_int32, [_P, C.c_char_p, C.POINTER(C.c_uint32), C.POINTER(C.c_uint32)] + _ERR),
    "opforge_registry_unload": (C.c_int32, [_P, C.c_char_p] + _ERR),
    "opforge_registry_reload": (C.c_int32, [_P, C.c_char_p] + _ERR),
    "opforge_registry_sync_dir": (C.c_int32, [_P, C.c_char_p, C.POINTER(C.c_uint32)] + _ERR),
    "opforge_registry_enumerate": (None, [_P, VisitFn, _P]),
    "opforge_registry_plugin_count": (C.c_uint32, [_P]),
    "opforge_acquire": (C.c_int32, [_P, C.c_char_p, C.c_uint32, C.POINTER(_P)] + _ERR),
    "opforge_release": (None, [_P]),
    "opforge_ref_def": (C.POINTER(OpDef), [_P]),
    "opforge_ref_plugin_version": (C.c_char_p, [_P]),
    "opforge_op_create": (C.c_int32, [_P, C.POINTER(AttrValue), C.c_uint32, C.POINTER(_P)] + _ERR),
    "opforge_op_destroy": (None, [_P, _P]),
    "opforge_op_output_shapes": (C.c_int32, [_P, _P, C.POINTER(Tensor), C.c_uint32, C.POINTER(TensorDesc), C.c_uint32] + _ERR),
    "opforge_op_compute": (C.c_int32, [_P, _P, C.POINTER(Tensor), C.c_uint32, C.POINTER(Tensor), C.c_uint32] + _ERR),
    "opforge_manifest_check": (C.c_int32, [C.c_char_p, C.c_char_p] + _ERR),
}


def library_path() -> str:
    return str(PACKAGE_DIR / "lib" / LIBRARY_FILE)


@functools.cache
def lib() -> C.CDLL:
    handle = C.CDLL(library_path())
    for name, (restype, argtypes) in _SIGNATURES.items():
        fn = getattr(handle, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return handle


def err_buffer() -> C.Array:
    return C.create_string_buffer(2048)
