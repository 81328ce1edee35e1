"""The sdist's build hook: a symlink among the sources is refused, naming it (hatchling would store
the link, whose target may lie outside the package: an sdist holds the tracked sources only)."""
from __future__ import annotations

import os
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


def symlinks(top: Path) -> list[Path]:
    """`top` and what lies under it that is a symlink (a linked folder is not entered)."""
    if top.is_symlink() or not top.is_dir():
        return [top] if top.is_symlink() else []
    found = []
    for folder, dirs, files in os.walk(top):
        found += [Path(folder, name) for name in [*dirs, *files] if Path(folder, name).is_symlink()]
    return found


class NoSymlinks(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict) -> None:
        root = Path(self.root)
        links = [link for source in self.build_config.only_include for link in symlinks(Path(source))]
        if links:
            shown = ", ".join(f"{link.relative_to(root)} -> {os.readlink(link)}" for link in links)
            raise SystemExit(f"{self.metadata.name}: the sdist refuses symlinks among its sources "
                             f"({shown}): remove them or replace each with the file it names")
