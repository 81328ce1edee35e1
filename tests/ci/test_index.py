"""The PEP 503 index pages (ci/artifacts/index.py): every link resolves to its own file, whatever the name;
a file whose name is no wheel or sdist name is refused in one line naming it."""
from __future__ import annotations

import hashlib
import io
import tarfile
import zipfile
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

import pytest

from ci.artifacts import index


class Links(HTMLParser):
    """(href, text) of every <a> of a page, as a browser or pip reads them."""

    def __init__(self, text: str):
        super().__init__()
        self.links: list[tuple[str, str]] = []
        self._href: str | None = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self._href = dict(attrs)["href"]
            self.links.append((self._href, ""))

    def handle_data(self, data):
        if self._href is not None:
            self.links[-1] = (self._href, self.links[-1][1] + data)

    def handle_endtag(self, tag):
        if tag == "a":
            self._href = None


def _resolved(page: Path, href: str) -> tuple[Path, str]:
    """The file an href of `page` points at, and its fragment."""
    url = urlsplit(urljoin(page.as_uri(), href))
    return Path(unquote(url.path)), url.fragment


def _sdist(folder: Path, name: str, project: str = "demo") -> Path:
    """A real sdist (a tar.gz holding <project>-1.0/PKG-INFO), under the file name `name`."""
    info = f"Metadata-Version: 2.1\nName: {project}\nVersion: 1.0\nRequires-Python: >=3.9\n".encode()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        member = tarfile.TarInfo(f"{project}-1.0/PKG-INFO")
        member.size = len(info)
        archive.addfile(member, io.BytesIO(info))
    path = folder / name
    path.write_bytes(buffer.getvalue())
    return path


def _wheel(folder: Path, name: str, project: str = "demo") -> Path:
    """A real wheel's archive (dist-info METADATA) under the file name `name`."""
    path = folder / name
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{project}-1.0.dist-info/METADATA",
                         f"Metadata-Version: 2.1\nName: {project}\nVersion: 1.0\n")
    return path


def _file(folder: Path, name: str) -> Path:
    return (_wheel if name.endswith(".whl") else _sdist)(folder, name)


# A name in a URL: `#` and `?` end the path, `%2e%2e` is `..`, `"` ends the attribute, `:` makes a
# scheme, a space or a newline breaks the line.
HOSTILE = ['a#b-1.0.tar.gz', 'a?b-1.0.tar.gz', '%2e%2e-1.0.tar.gz', '..-1.0.tar.gz',
           'a"b-1.0.tar.gz', "a'b-1.0.tar.gz", 'x:y-1.0.tar.gz', 'a<b>-1.0.tar.gz', 'a&b-1.0.tar.gz',
           'demo-1.0 .tar.gz', 'demo-1.0\n.tar.gz',
           'demo-1.0-py3-none-any#x.whl', 'demo-1.0-1?x-py3-none-any.whl',
           'demo-1.0-py3-none-a"ny.whl', 'demo-1.0.zip', 'demo-1.0.tar.bz2']


@pytest.mark.parametrize("name", HOSTILE, ids=ascii)
def test_a_name_that_is_no_wheel_or_sdist_name_is_refused_in_one_line(tmp_path, name):
    path = _file(tmp_path, name)
    with pytest.raises(index.IndexFileError) as refused:
        index.write_index([path], tmp_path / "ix")
    message = str(refused.value)
    assert "\n" not in message, message
    assert ascii(str(path))[1:-1] in message or str(path) in message, message
    assert "not a wheel or sdist file name" in message and "expected" in message, message
    assert not (tmp_path / "ix" / "simple" / "index.html").exists()


@pytest.mark.parametrize("name", [n for n in HOSTILE if "\n" not in n], ids=ascii)
def test_a_file_link_resolves_to_its_own_file(tmp_path, name):
    """The link of any file name, as pip and browsers read it, points at that file in the same
    folder with its sha256, and its text is the name."""
    path = _file(tmp_path, name)
    page = tmp_path / "index.html"
    ((href, text),) = Links(index.file_link(path)).links
    target, fragment = _resolved(page, href)
    assert target == path and fragment == f"sha256={hashlib.sha256(path.read_bytes()).hexdigest()}", href
    assert text == name


def test_pages_link_every_project_and_file_and_pip_names_read_back(tmp_path):
    files = [_sdist(tmp_path, "Demo.Pkg-1!1.0.tar.gz", "Demo.Pkg"),
             _wheel(tmp_path, "demo_pkg-1.0+cu130-1-py3-none-any.whl", "demo_pkg"),
             _sdist(tmp_path, "other-2.0.tar.gz", "other")]
    assert index.write_index(files, tmp_path / "ix") == {
        "demo-pkg": ["Demo.Pkg-1!1.0.tar.gz", "demo_pkg-1.0+cu130-1-py3-none-any.whl"],
        "other": ["other-2.0.tar.gz"]}
    simple = tmp_path / "ix" / "simple"
    root = [(_resolved(simple / "index.html", href)[0], text)
            for href, text in Links((simple / "index.html").read_text()).links]
    assert root == [(simple / "demo-pkg", "demo-pkg"), (simple / "other", "other")]
    for folder, _ in root:
        for href, text in Links((folder / "index.html").read_text()).links:
            target, fragment = _resolved(folder / "index.html", href)
            assert target == folder / text and target.is_file(), href
            assert fragment == f"sha256={index.sha256(target)}"
    assert 'href="Demo.Pkg-1%211.0.tar.gz#sha256=' in (simple / "demo-pkg" / "index.html").read_text()
    assert 'data-requires-python="&gt;=3.9"' in (simple / "demo-pkg" / "index.html").read_text()
