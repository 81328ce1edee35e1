"""Static PEP 503 "simple" indexes: one folder a static host serves as is, or pip reads as file://.

    <root>/simple/index.html                     every project, linked by its normalized name
    <root>/simple/<project>/index.html           its files: href="<file>#sha256=<hex>"
    <root>/simple/<project>/<file>               the wheels and sdists themselves

Links are relative, so the folder can be moved or uploaded anywhere. Project names are normalized
with packaging's canonicalize_name (PEP 503); `data-requires-python` carries the wheel's
Requires-Python (PEP 503, HTML-escaped), so pip skips files for another Python without downloading.
"""
from __future__ import annotations

import email.message
import email.parser
import hashlib
import html
import shutil
import tarfile
import zipfile
from collections.abc import Iterable
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)

PAGE = ('<!DOCTYPE html>\n<html>\n<head>\n<meta name="pypi:repository-version" content="1.0">\n'
        "<title>{title}</title>\n</head>\n<body>\n<h1>{title}</h1>\n{links}</body>\n</html>\n")


class IndexFileError(ValueError):
    """A file that cannot go into an index: the message names it and what was expected."""


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def project_of(path: Path) -> tuple[str, str]:
    """(normalized project name, version) from a wheel's or sdist's file name."""
    try:
        if path.name.endswith(".whl"):
            name, version, _, _ = parse_wheel_filename(path.name)
        else:
            name, version = parse_sdist_filename(path.name)
    except (InvalidWheelFilename, InvalidSdistFilename) as exc:
        raise IndexFileError(f"{path}: not a wheel or sdist file name ({exc})") from None
    return canonicalize_name(name), str(version)


def metadata(path: Path) -> email.message.Message:
    """A wheel's METADATA or an sdist's PKG-INFO (empty when absent)."""
    text = ""
    if path.name.endswith(".whl"):
        with zipfile.ZipFile(path) as archive:
            member = next((n for n in archive.namelist()
                           if n.count("/") == 1 and n.endswith(".dist-info/METADATA")), None)
            text = archive.read(member).decode() if member else ""
    elif path.name.endswith(".tar.gz"):
        with tarfile.open(path) as archive:
            member = next((m for m in archive.getmembers()
                           if m.name.count("/") == 1 and m.name.endswith("/PKG-INFO")), None)
            text = archive.extractfile(member).read().decode() if member else ""
    return email.parser.Parser().parsestr(text)


def requires_python(path: Path) -> str:
    """The Requires-Python of a wheel or sdist ('' when absent)."""
    return metadata(path).get("Requires-Python", "") or ""


def runtime_requirements(path: Path) -> list[Requirement]:
    """A wheel's Requires-Dist that apply on this machine without any extra."""
    found = [Requirement(text) for text in metadata(path).get_all("Requires-Dist") or []]
    return [req for req in found if req.marker is None or req.marker.evaluate({"extra": ""})]


def _link(path: Path) -> str:
    python = requires_python(path)
    attribute = f' data-requires-python="{html.escape(python)}"' if python else ""
    return (f'<a href="{html.escape(path.name)}#sha256={sha256(path)}"{attribute}>'
            f"{html.escape(path.name)}</a><br/>\n")


def write_index(files: Iterable[Path], root: Path) -> dict[str, list[str]]:
    """A fresh index at root/simple holding copies of `files`; returns project -> file names."""
    projects: dict[str, list[Path]] = {}
    for path in map(Path, files):
        if not path.is_file():
            raise IndexFileError(f"{path}: no such file (expected a built wheel or sdist)")
        projects.setdefault(project_of(path)[0], []).append(path)
    simple = root / "simple"
    shutil.rmtree(simple, ignore_errors=True)
    simple.mkdir(parents=True)
    for project, paths in sorted(projects.items()):
        folder = simple / project
        folder.mkdir()
        names = [p.name for p in paths]
        duplicate = next((n for n in names if names.count(n) > 1), None)
        if duplicate:
            raise IndexFileError(f"{root}: {duplicate} given twice (one file name, one file)")
        for path in paths:
            shutil.copy2(path, folder / path.name)
        links = "".join(_link(folder / name) for name in sorted(names))
        (folder / "index.html").write_text(PAGE.format(title=f"Links for {project}", links=links))
    links = "".join(f'<a href="{p}/">{p}</a><br/>\n' for p in sorted(projects))
    (simple / "index.html").write_text(PAGE.format(title="Simple index", links=links))
    return {project: sorted(p.name for p in paths) for project, paths in sorted(projects.items())}
