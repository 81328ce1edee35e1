"""opforge custom operators for ONNX Runtime: where the custom-op library is, and how to use it.

    import onnxruntime as ort, opforge_ort
    so = ort.SessionOptions()
    so.register_custom_ops_library(opforge_ort.library_path())
"""
from __future__ import annotations

import json
from pathlib import Path

__version__ = "0.1.0"
__all__ = ["DOMAIN", "DOMAIN_VERSION", "LIBRARY_NAME", "OPS", "ModelError", "build_info", "check_model",
           "inference_session", "library_path", "manifest", "manifest_path", "session_options"]

from ._spec import ATTRIBUTES, DOMAIN, DOMAIN_VERSION, OPS  # noqa: F401  (read from opforge_spec)

LIBRARY_NAME = "libopforge_ort.so.1"
_HERE = Path(__file__).resolve().parent


def library_path() -> str:
    """Absolute path of the installed libopforge_ort.so.1 (for `register_custom_ops_library`)."""
    path = _HERE / LIBRARY_NAME
    if not path.is_file():
        raise FileNotFoundError(
            f"opforge_ort: {path} is missing: the package was not built (install it with "
            f"`pip install packages/ort_plugin`, not by putting src/ on sys.path)")
    return str(path)


def manifest_path() -> str:
    """Absolute path of the plugin manifest shipped next to the library."""
    return str(_HERE / f"{LIBRARY_NAME}.manifest.json")


def manifest() -> dict:
    return json.loads(Path(manifest_path()).read_text())


def build_info() -> dict:
    """How this library was built: {"cuda": bool, "cuda_architectures": [...], "ort_min_api": int, ...}."""
    return json.loads((_HERE / "build_info.json").read_text())


def session_options(options=None):
    """`options` (or new onnxruntime.SessionOptions) with the opforge domain registered."""
    import onnxruntime

    options = options if options is not None else onnxruntime.SessionOptions()
    options.register_custom_ops_library(library_path())
    return options


from .models import ModelError, check_model, inference_session  # noqa: E402  (uses the names above)
