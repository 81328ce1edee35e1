"""scikit-build-core dynamic-metadata provider: the variant's version and CUDA-only extras.

The one copy, shared by the packages that build with scikit-build-core and opforge-spec
(ort_plugin, trt_plugin; it was build_support/opforge_variant.py in each): a package names it
`provider = "opforge_variant"` in its [[tool.dynamic-metadata]] (the entry point of that name in
the group dynamic_metadata.provider, kernels/pyproject.toml), with opforge-spec in its
[build-system] requires. It uses nothing but the standard library.

Build inputs (environment), documented in the package README:
  OPFORGE_LOCAL_VERSION  the variant's PEP 440 local label, e.g. "cu130" -> 0.1.0+cu130; unset or
                         empty: the plain version (the default variant, the one for PyPI)
  OPFORGE_CUDA_HOME      set: a CUDA build, which also gets the `cuda-extras` and the
                         `cuda-dependencies` of its CUDA major (read from include/cuda.h)

Settings ([[tool.dynamic-metadata]] in pyproject.toml): `version` (the base version),
`dependencies` (every build's requirements: a package whose dependencies are dynamic cannot list
them in [project]), `cuda-extras` (CUDA major -> extra name -> requirements, added to a CUDA build of that major only)
and `cuda-dependencies` (CUDA major -> requirements: the CUDA runtime wheel the library's RUNPATH
points into).
"""
from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
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
    cuda_home = os.environ.get("OPFORGE_CUDA_HOME", "").strip()
    major = cuda_major(cuda_home) if cuda_home else None
    extras = dict(settings.get("cuda-extras", {}).get(major, {})) if major else {}
    runtime = settings.get("cuda-dependencies", {}).get(major, []) if major else []
    return {"version": version, "optional-dependencies": extras,
            "dependencies": [*settings.get("dependencies", []), *project.get("dependencies", []),
                             *runtime]}


def cuda_major(cuda_home: str) -> str:
    header = Path(cuda_home) / "include" / "cuda.h"
    found = re.search(r"#define\s+CUDA_VERSION\s+(\d+)", header.read_text()) if header.is_file() else None
    if not found:
        raise ValueError(f"OPFORGE_CUDA_HOME={cuda_home}: expected a CUDA toolkit with include/cuda.h "
                         f"defining CUDA_VERSION")
    return str(int(found[1]) // 1000)


def dynamic_wheel(settings: Mapping[str, Any]) -> dict[str, bool]:
    """A wheel built from the sdist with OPFORGE_CUDA_HOME set gains the CUDA extras and runtime."""
    return {"optional-dependencies": bool(settings.get("cuda-extras")),
            "dependencies": bool(settings.get("cuda-dependencies") or settings.get("dependencies"))}
