"""opforge_loader: hot-plug operator plugins (C ABI SDK, C++ host, Python API, CLI)."""
from __future__ import annotations

from ._capi import PACKAGE_DIR, library_path
from .errors import ManifestError, OpforgeError
from .registry import Op, OpInfo, Registry, check_manifest
from .runtimes import register_with_onnxruntime

__version__ = "0.1.0"
__all__ = [
    "ManifestError",
    "Op",
    "OpInfo",
    "OpforgeError",
    "Registry",
    "__version__",
    "check_manifest",
    "cmake_dir",
    "include_dir",
    "library_path",
    "plugin_dir",
    "register_with_onnxruntime",
]


def include_dir() -> str:
    """Directory holding opforge/plugin.h (the SDK) and opforge/loader.h (the host C API)."""
    return str(PACKAGE_DIR / "include")


def cmake_dir() -> str:
    """Directory of opforge_pluginConfig.cmake: -Dopforge_plugin_DIR=<this>."""
    return str(PACKAGE_DIR / "share" / "cmake" / "opforge_plugin")


def plugin_dir() -> str:
    """The plugins shipped with the package (libops_opforge_nn.so.1, libops_example_scale.so.1)."""
    return str(PACKAGE_DIR / "plugins")

