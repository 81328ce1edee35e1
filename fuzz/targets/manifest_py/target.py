"""Fuzz target (atheris): a manifest's bytes into the Python reader every opforge-loader CLI
command uses (opforge_loader.manifests.parse: UTF-8, JSON, the field types of
manifest.schema.json). ManifestError is a refusal; anything else is a finding, and so is an
accepted manifest whose fields do not have the types the CLI relies on.

    python -m fuzz.pytarget fuzz/targets/manifest_py/target.py fuzz/targets/manifest_py/corpus -max_total_time=60
"""
from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
try:
    from opforge_loader import manifests
    from opforge_loader.errors import ManifestError
except ImportError:  # not installed: the package's sources
    sys.path.insert(0, str(REPO / "packages" / "loader" / "src"))
    from opforge_loader import manifests
    from opforge_loader.errors import ManifestError


def test_one_input(data: bytes) -> None:
    try:
        m = manifests.parse("fuzz.manifest.json", data)
    except ManifestError as e:
        if "\n" in str(e):
            raise AssertionError(f"a refusal must be one line: {e!r}") from None
        return
    _check_types(m)


def _check_types(m: manifests.Manifest) -> None:
    strings = (m.name, m.version, m.kind, m.data["library"], m.data["sha256"], m.data["sdk"]["min"])
    assert all(type(v) is str for v in strings), m
    assert type(m.api_version) is int and type(m.data["manifest_version"]) is int, m
    assert m.kind in manifests.KINDS and m.ops, m
    for op in m.ops:
        assert type(op.domain) is str and type(op.name) is str and type(op.version) is int, op


if __name__ == "__main__":  # no atheris: replay files given on the command line
    for name in sys.argv[1:]:
        for path in sorted(Path(name).glob("*")) if Path(name).is_dir() else [Path(name)]:
            test_one_input(path.read_bytes())
