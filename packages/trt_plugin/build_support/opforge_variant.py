"""scikit-build-core dynamic-metadata provider: the variant's version and CUDA-only extras.

Build inputs (environment), documented in the package README:
  OPFORGE_LOCAL_VERSION  the variant's PEP 440 local label, e.g. "cu130" -> 0.1.0+cu130; unset or
                         empty: the plain version (the default variant, the one for PyPI)
  OPFORGE_CUDA_HOME      set: a CUDA build, which also gets the `cuda-extras` of the settings

Settings ([[tool.dynamic-metadata]] in pyproject.toml): `version` (the base version) and
`cuda-extras` (extra name -> requirements, added to a CUDA build only).
"""
from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

LABEL = re.compile(r"[a-z0-9]+(\.[a-z0-9]+)*")


def local_label() -> str:
    label = os.environ.get("OPFORGE_LOCAL_VERSION", "").strip()
    if label and not LABEL.fullmatch(label):
        raise ValueError(f"OPFORGE_LOCAL_VERSION: expected a local version label such as cu130 "
                         f"(lower-case letters, digits, dots), got {label!r}")
    return label


def dynamic_metadata(settings: Mapping[str, Any], project: Mapping[str, Any]) -> dict[str, Any]:
    label = local_label()
    version = str(settings["version"]) + (f"+{label}" if label else "")
    with_cuda = bool(os.environ.get("OPFORGE_CUDA_HOME", "").strip())
    extras = dict(settings.get("cuda-extras", {})) if with_cuda else {}
    return {"version": version, "optional-dependencies": extras}


def dynamic_wheel(settings: Mapping[str, Any]) -> dict[str, bool]:
    """A wheel built from the sdist with OPFORGE_CUDA_HOME set gains the CUDA extras."""
    return {"optional-dependencies": bool(settings.get("cuda-extras"))}
