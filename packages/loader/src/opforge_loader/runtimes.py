"""Manifests of the other kinds: ONNX Runtime custom-op libraries and TensorRT plugin libraries."""
from __future__ import annotations

import os

from . import manifests
from .errors import OpforgeError
from .registry import check_manifest


def ort_api_version(ort_version: str) -> int:
    """ONNX Runtime 1.N ships ORT_API_VERSION N."""
    major, minor = (int(p) for p in ort_version.split(".")[:2])
    return minor if major == 1 else 1000 * major + minor


def check_onnxruntime_manifest(manifest: str | os.PathLike, ort_version: str) -> None:
    """Raise OpforgeError unless the library is an intact kind=onnxruntime library for this ORT."""
    m = manifests.load(manifest)
    check_manifest(manifest, ort_version)
    lib = m.library
    if m.kind != "onnxruntime":
        raise OpforgeError(f"opforge-loader: refused {lib}: kind \"{m.kind}\" is not an ONNX Runtime library")
    have = ort_api_version(ort_version)
    if m.api_version > have:
        raise OpforgeError(f"opforge-loader: refused {lib}: needs ORT API {m.api_version}, onnxruntime "
                           f"{ort_version} provides {have} (built against newer headers: 'Unsupported version' "
                           "at session creation otherwise)")


def register_with_onnxruntime(session_options, directory: str | os.PathLike, *, ort_version: str | None = None) -> list[str]:
    """Check every kind=onnxruntime manifest under directory, then register the libraries with
    session_options.register_custom_ops_library. All are checked before any is registered, so a
    refusal (OpforgeError) leaves session_options untouched. Returns the registered paths."""
    if ort_version is None:
        import onnxruntime

        ort_version = onnxruntime.__version__
    chosen = []
    for manifest in manifests.find_manifests(directory):
        if manifests.load(manifest).kind != "onnxruntime":  # ManifestError when unusable
            continue
        check_onnxruntime_manifest(manifest, ort_version)
        chosen.append(str(manifests.library_of(manifest)))
    for path in chosen:
        session_options.register_custom_ops_library(path)
    return chosen
