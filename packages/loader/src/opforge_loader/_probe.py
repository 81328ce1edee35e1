"""Child process of `doctor --isolated`: load a library and run its entry (and init) so that a
crash takes down this process, not the caller. Prints the phase reached, one per line."""
from __future__ import annotations

import ctypes as C
import os
import sys


def main(path: str, kind: str) -> int:
    print("dlopen", flush=True)
    lib = C.CDLL(path, mode=os.RTLD_NOW | os.RTLD_LOCAL)
    print("loaded", flush=True)
    if kind != "opforge":
        return 0
    from . import _capi

    class Plugin(C.Structure):
        _fields_ = [("api_version", C.c_uint32), ("struct_size", C.c_uint32), ("name", C.c_char_p),
                    ("version", C.c_char_p), ("num_ops", C.c_uint32), ("ops", C.POINTER(_capi.OpDef)),
                    ("init", C.c_void_p), ("unload", C.c_void_p)]

    class HostInfo(C.Structure):
        _fields_ = [("api_version", C.c_uint32), ("host_version", C.c_char_p)]

    entry = lib.opforge_plugin_entry
    entry.restype = C.POINTER(Plugin)
    plugin = entry().contents
    print(f"entry api_version={plugin.api_version} ops={plugin.num_ops}", flush=True)
    if plugin.init:
        init = C.CFUNCTYPE(C.c_int32, C.POINTER(HostInfo), C.c_char_p, C.c_size_t)(plugin.init)
        err = C.create_string_buffer(1024)
        status = init(C.byref(HostInfo(1, b"probe")), err, len(err) - 1)
        if status != 0:
            print(f"init failed (status {status}): {err.value.decode(errors='replace')}", file=sys.stderr)
            return 1
        print("init ok", flush=True)
    if plugin.unload:
        C.CFUNCTYPE(None)(plugin.unload)()
        print("unload ok", flush=True)
    print(f"entry, init and unload ran (plugin {plugin.name.decode()} {plugin.version.decode()})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else ""))
