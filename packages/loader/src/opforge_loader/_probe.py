"""The child process of isolation.run_isolated: load a library and run its entry, init and unload
so that a crash or a hang takes down this process, not the caller. Prints the phase reached, one
per line. Run as a script in isolated mode (`python -I _probe.py PATH KIND [MAX_API]`): it needs
nothing but ctypes, so it starts fast and imports nothing of the package."""
from __future__ import annotations

import ctypes as C
import os
import sys


class Plugin(C.Structure):
    """The head of OpforgePlugin (include/opforge/plugin.h)."""

    _fields_ = [("api_version", C.c_uint32), ("struct_size", C.c_uint32), ("name", C.c_char_p),
                ("version", C.c_char_p), ("num_ops", C.c_uint32), ("ops", C.c_void_p),
                ("init", C.c_void_p), ("unload", C.c_void_p)]


class HostInfo(C.Structure):
    _fields_ = [("api_version", C.c_uint32), ("host_version", C.c_char_p)]


def _text(value: bytes | None) -> str:
    return value.decode(errors="replace") if value else "(null)"


def main(path: str, kind: str, max_api: int | None) -> int:
    print("dlopen", flush=True)
    lib = C.CDLL(path, mode=os.RTLD_NOW | os.RTLD_LOCAL)
    print("loaded", flush=True)
    if kind != "opforge":
        return 0
    entry = lib.opforge_plugin_entry
    entry.restype = C.POINTER(Plugin)
    found = entry()
    if not found:
        print("opforge_plugin_entry() returned NULL", file=sys.stderr)
        return 1
    plugin = found.contents
    print(f"entry api_version={plugin.api_version} ops={plugin.num_ops}", flush=True)
    if max_api is not None and not 1 <= plugin.api_version <= max_api:
        # Another layout: calling its init through this one could crash for no fault of the plugin.
        print(f"api_version {plugin.api_version} out of range [1, {max_api}]: init not run", file=sys.stderr)
        return 1
    if plugin.init:
        init = C.CFUNCTYPE(C.c_int32, C.POINTER(HostInfo), C.c_char_p, C.c_size_t)(plugin.init)
        err = C.create_string_buffer(1024)
        status = init(C.byref(HostInfo(max_api or 1, b"probe")), err, len(err) - 1)
        if status != 0:
            print(f"init failed (status {status}): {err.value.decode(errors='replace')}", file=sys.stderr)
            return 1
        print("init ok", flush=True)
    if plugin.unload:
        C.CFUNCTYPE(None)(plugin.unload)()
        print("unload ok", flush=True)
    print(f"entry, init and unload ran (plugin {_text(plugin.name)} {_text(plugin.version)})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "",
                  int(sys.argv[3]) if len(sys.argv) > 3 else None))
