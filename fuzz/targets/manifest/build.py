"""Build inputs of the manifest target: the loader host's manifest reader (instrumented) with the
headers of nlohmann-json, found the way the package build finds them: the Python package
nlohmann-json (packages/loader's build requirement and `test` extra), else
OPFORGE_NLOHMANN_JSON_INCLUDE_DIR."""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

HERE = Path(__file__).resolve().parent
# manifest.cpp and what it calls; registry.cpp and c_api.cpp (dlopen, plugins) are not needed.
HOST_SOURCES = ["manifest.cpp", "json.cpp", "text.cpp", "files.cpp", "image.cpp", "sha256.cpp"]


def _unavailable(reason: str) -> Exception:
    try:
        from fuzz import Unavailable
    except ImportError:  # an engine without the verdict type yet
        return RuntimeError(f"unavailable: {reason}")
    return Unavailable(reason)


def _nlohmann_json_include() -> Path:
    env = os.environ.get("OPFORGE_NLOHMANN_JSON_INCLUDE_DIR")
    candidates = [Path(env)] if env else []
    spec = importlib.util.find_spec("nlohmann_json")  # located, not imported
    if spec is not None and spec.submodule_search_locations:
        candidates.append(Path(next(iter(spec.submodule_search_locations))) / "include")
    for include in candidates:
        if (include / "nlohmann" / "json.hpp").is_file():
            return include
    raise _unavailable("no nlohmann/json.hpp: pip install nlohmann-json==3.12.0 "
                       "(or set OPFORGE_NLOHMANN_JSON_INCLUDE_DIR)")


def compile_inputs(repo: Path) -> dict:
    package = Path(repo) / "packages" / "loader"
    return {
        "sources": [str(HERE / "target.cpp"), *(str(package / "csrc" / "host" / name) for name in HOST_SOURCES)],
        "include_dirs": [str(package / "csrc" / "host"), str(package / "include"), str(_nlohmann_json_include())],
        "defines": [],
        "extra_objects": [],
        "link_args": ["-ldl"],
    }
