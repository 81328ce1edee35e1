"""Print the ONNX Runtime build inputs that matrix.yaml pins, as CMake `set()` lines.

matrix.yaml is the single source of versions: the ORT header package (fetched from Debian with
ci/debian.py, never copied into the repo) and the minimum ORT API version the plugin requests.
"""
from __future__ import annotations

import sys
from pathlib import Path

import yaml


def main(repo_root: str) -> int:
    sources = yaml.safe_load((Path(repo_root) / "matrix.yaml").read_text())["sources"]
    headers = sources["ort_headers"]
    values = {
        "OPFORGE_ORT_MIN_API": int(sources["ort_min_api"]),
        "OPFORGE_ORT_HEADERS_PACKAGE": headers["package"],
        "OPFORGE_ORT_HEADERS_VERSION": headers["version"],
        "OPFORGE_ORT_HEADERS_SUITE": headers.get("debian_suite", "trixie"),
    }
    for name, value in values.items():
        print(f'set({name} "{value}")')
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
