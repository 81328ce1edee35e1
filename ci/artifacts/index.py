"""Static PEP 503 "simple" indexes: one folder a static host serves as is, or pip reads as file://.

    <root>/simple/index.html                     every project, linked by its normalized name
    <root>/simple/<project>/index.html           its files: href="<file>#sha256=<hex>"
    <root>/simple/<project>/<file>               the wheels and sdists themselves

Links are relative, so the folder can be moved or uploaded anywhere. Project names are normalized
with packaging's canonicalize_name (PEP 503); `data-requires-python` carries the wheel's
Requires-Python (PEP 503, HTML-escaped), so pip skips files for another Python without downloading.
Every href is URL-quoted, then HTML-escaped; every text is HTML-escaped. Only valid wheel and
sdist (.tar.gz) file names are taken, so no name can point a link elsewhere.
"""
from __future__ import annotations

import email.message
import email.parser
import hashlib
import html
import re
import shutil
import tarfile
import zipfile
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import quote

from packaging.requirements import Requirement
from packaging.utils import (
    InvalidName,
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)

PAGE = ('<!DOCTYPE html>\n<html>\n<head>\n<meta name="pypi:repository-version" content="1.0">\n'
        "<title>{title}</title>\n</head>\n<body>\n<h1>{title}</h1>\n{links}</body>\n</html>\n")


# What a wheel's or sdist's name is made of: a project name, a PEP 440 version (`!` epoch, `+`
# local label), build and compatibility tags. packaging's parsers accept more in the version and
# tags (spaces, `#`, quotes), which no build writes.
FILE_NAME_CHARACTERS = re.compile(r"[A-Za-z0-9._+!-]+")
EXPECTED_NAME = ("a wheel (<name>-<version>[-<build>]-<python>-<abi>-<platform>.whl) or an sdist "
                 "(<name>-<version>.tar.gz) file name")


class IndexFileError(ValueError):
    """A file that cannot go into an index: the message names it and what was expected."""


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _shown(path: Path) -> str:
    """The path as one printable line (a name with a newline or a control character is quoted)."""
    return str(path) if str(path).isprintable() else ascii(str(path))


def project_of(path: Path) -> tuple[str, str]:
    """(normalized project name, version) from a wheel's or sdist's file name."""
    try:
        if not FILE_NAME_CHARACTERS.fullmatch(path.name):
            raise ValueError("characters other than letters, digits and . _ + ! -")
        if path.name.endswith(".whl"):
            name, version, _, _ = parse_wheel_filename(path.name)
        elif path.name.endswith(".tar.gz"):
            name, version = parse_sdist_filename(path.name)
            canonicalize_name(name, validate=True)
        else:
            raise ValueError("neither .whl nor .tar.gz")
    except (InvalidWheelFilename, InvalidSdistFilename, InvalidName, ValueError) as exc:
        raise IndexFileError(f"{_shown(path)}: not a wheel or sdist file name ({exc}); expected "
                             f"{EXPECTED_NAME}") from None
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
            info = next((m for m in archive.getmembers()
                         if m.name.count("/") == 1 and m.name.endswith("/PKG-INFO")), None)
            handle = archive.extractfile(info) if info else None
            text = handle.read().decode() if handle else ""
    return email.parser.Parser().parsestr(text)


def requires_python(path: Path) -> str:
    """The Requires-Python of a wheel or sdist ('' when absent)."""
    return metadata(path).get("Requires-Python", "") or ""


def runtime_requirements(path: Path) -> list[Requirement]:
    """A wheel's Requires-Dist that apply on this machine without any extra."""
    found = [Requirement(text) for text in metadata(path).get_all("Requires-Dist") or []]
    return [req for req in found if req.marker is None or req.marker.evaluate({"extra": ""})]


def anchor(segment: str, text: str, suffix: str = "", attributes: str = "") -> str:
    """One link line to the relative path `segment` + `suffix` ('/' or '#<fragment>'): the segment
    URL-quoted (every character but letters, digits and _ . - ~), the href and `text` HTML-escaped."""
    href = quote(segment, safe="") + suffix
    return f'<a href="{html.escape(href)}"{attributes}>{html.escape(text)}</a><br/>\n'


def file_link(path: Path) -> str:
    """The link line of a file on its project's page: its sha256 and its Requires-Python."""
    python = requires_python(path)
    attributes = f' data-requires-python="{html.escape(python)}"' if python else ""
    return anchor(path.name, path.name, f"#sha256={sha256(path)}", attributes)


def write_index(files: Iterable[Path], root: Path) -> dict[str, list[str]]:
    """A fresh index at root/simple holding copies of `files`; returns project -> file names."""
    projects: dict[str, list[Path]] = {}
    for path in map(Path, files):
        if not path.is_file():
            raise IndexFileError(f"{_shown(path)}: no such file (expected a built wheel or sdist)")
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
        links = "".join(file_link(folder / name) for name in sorted(names))
        title = html.escape(f"Links for {project}")
        (folder / "index.html").write_text(PAGE.format(title=title, links=links))
    links = "".join(anchor(p, p, "/") for p in sorted(projects))
    (simple / "index.html").write_text(PAGE.format(title="Simple index", links=links))
    return {project: sorted(p.name for p in paths) for project, paths in sorted(projects.items())}
