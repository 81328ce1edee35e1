"""opforge custom operators as TensorRT 10 IPluginV3 plugins: where the plugin library is, and how
to load it. Load it into TensorRT's plugin registry *before* parsing an ONNX model or
deserializing an engine that uses the plugins:

    import tensorrt as trt, opforge_trt
    trt.get_plugin_registry().load_library(opforge_trt.library_path())

Plugins: one per op of the spec (`OPS`: plugin name -> its fields, the op's attributes), version "1",
namespace "opforge"; an ONNX node `opforge::<op>` maps onto its plugin through the ONNX parser's plugin
fallback (plugin name = op_type, namespace = the node's domain).
"""
from __future__ import annotations

import json
from pathlib import Path

__version__ = "0.1.0"
__all__ = ["DOMAIN", "LIBRARY_NAME", "NAMESPACE", "OPS", "PLUGIN_VERSION", "build_info", "library_path",
           "load_into", "manifest", "manifest_path"]

from ._spec import ATTRIBUTES, DOMAIN  # read from opforge_spec

NAMESPACE = DOMAIN
PLUGIN_VERSION = "1"
OPS = {op: tuple(name for name, _ in attrs) for op, attrs in ATTRIBUTES.items()}  # plugin name -> its fields (= ONNX attributes)
LIBRARY_NAME = "libopforge_trt.so.1"
_HERE = Path(__file__).resolve().parent


def library_path() -> str:
    """Absolute path of the installed libopforge_trt.so.1."""
    path = _HERE / LIBRARY_NAME
    if not path.is_file():
        raise FileNotFoundError(
            f"opforge_trt: {path} is missing: the package was not built (install it with "
            f"`pip install packages/trt_plugin` and OPFORGE_CUDA_HOME set, not by putting src/ on sys.path)")
    return str(path)


def manifest_path() -> str:
    """Absolute path of the plugin manifest shipped next to the library."""
    return str(_HERE / f"{LIBRARY_NAME}.manifest.json")


def manifest() -> dict:
    return json.loads(Path(manifest_path()).read_text())


def build_info() -> dict:
    """How this library was built: {"cuda": True, "cuda_architectures": [...], "tensorrt_headers": "10.14.1", ...}."""
    return json.loads((_HERE / "build_info.json").read_text())


def load_into(registry=None):
    """Load the library into a TensorRT plugin registry (default: the global one); returns the handle.
    Call it before parsing ONNX models or deserializing engines that use the plugins."""
    if registry is None:
        import tensorrt

        registry = tensorrt.get_plugin_registry()
    return registry.load_library(library_path())
