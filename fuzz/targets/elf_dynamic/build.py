"""Build inputs of the elf_dynamic target: the loader host's header-only ELF dynamic-section reader
(packages/loader/csrc/host/elf_dynamic.h), which needs only <elf.h> from the C library."""
from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent


def _unavailable(reason: str) -> Exception:
    try:
        from fuzz import Unavailable
    except ImportError:  # an engine without the verdict type yet
        return RuntimeError(f"unavailable: {reason}")
    return Unavailable(reason)


def compile_inputs(repo: Path) -> dict:
    host = Path(repo) / "packages" / "loader" / "csrc" / "host"
    if not (host / "elf_dynamic.h").is_file():
        raise _unavailable(f"{host / 'elf_dynamic.h'} not found")
    return {"sources": [str(HERE / "target.cpp")], "include_dirs": [str(host)], "defines": [],
            "extra_objects": [], "link_args": []}
