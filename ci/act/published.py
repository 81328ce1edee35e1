"""After release.yml's publish: what the local package index serves is what the workflow uploaded.

Every file of the `pypi` artifact (the packages-dir the publish step was given) must be served by
the index, byte for byte (sha256 of the file fetched from its link), and nothing else; then the
wheels install from the index with pip in a fresh venv, as a user's `pip install` would fetch
them. A project served as an sdist only (opforge-trt: a CUDA build whose wheels live in the
`+cu…` indexes) is fetched and compared, not built: its build needs a CUDA toolkit.
"""
from __future__ import annotations

import hashlib
import html.parser
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

from ci.act import report
from ci.artifacts import index as index_files


class _Links(html.parser.HTMLParser):
    """Every <a href> of a page, HTML-unescaped (the parser does that for attribute values)."""

    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.hrefs += [value for name, value in attrs if tag == "a" and name == "href" and value]


def links(page: str) -> list[str]:
    parser = _Links()
    parser.feed(page)
    return parser.hrefs


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url) as page:
        return page.read()


def served_files(index: str) -> dict[str, str]:
    """file name -> sha256 of every file the PEP 503 index at `index` links to."""
    simple = f"{index.rstrip('/')}/simple/"
    found = {}
    for project in links(_get(simple).decode()):
        page = urllib.parse.urljoin(simple, project)
        for link in links(_get(page).decode()):
            url = urllib.parse.urljoin(page, link).split("#", 1)[0]
            name = urllib.parse.unquote(Path(urllib.parse.urlparse(url).path).name)
            found[name] = hashlib.sha256(_get(url)).hexdigest()
    return found


def uploaded_files(folder: Path) -> dict[str, str]:
    return {p.name: index_files.sha256(p) for p in sorted(folder.iterdir()) if p.is_file()}


def differences(uploaded: dict[str, str], served: dict[str, str]) -> list[str]:
    """What the index does not serve as uploaded, one line each ([] when it serves exactly that)."""
    lines = [f"{name}: uploaded, not served" for name in sorted(set(uploaded) - set(served))]
    lines += [f"{name}: served, never uploaded" for name in sorted(set(served) - set(uploaded))]
    lines += [f"{name}: served with sha256 {served[name][:12]}…, uploaded {uploaded[name][:12]}…"
              for name in sorted(set(uploaded) & set(served)) if uploaded[name] != served[name]]
    return lines


def project(file_name: str) -> str:
    """The distribution of a wheel or sdist file name, as pip names it."""
    return index_files.project_of(Path(file_name))[0]


def check(index: str, uploaded_folder: Path, out: Path) -> report.Row:
    started = time.monotonic()

    def row(status: str, why: str) -> report.Row:
        return report.Row("release.yml", "publish", "(after the workflow) the local index serves "
                          "the uploaded files; pip installs its wheels", status, why,
                          time.monotonic() - started)

    if not uploaded_folder.is_dir():
        return row("failed", f"no uploaded files at {uploaded_folder} (the pypi artifact)")
    uploaded, served = uploaded_files(uploaded_folder), served_files(index)
    wrong = differences(uploaded, served)
    if not served or wrong:
        return row("failed", "; ".join(wrong) or "the local index holds no file")
    wheels = sorted({project(name) for name in served if name.endswith(".whl")})
    sdist_only = sorted({project(name) for name in served} - set(wheels))
    venv = out / "index-check"
    steps = [["python3", "-m", "venv", "--clear", str(venv)],
             [str(venv / "bin" / "pip"), "--isolated", "install", "--no-deps", "--only-binary",
              ":all:", "--index-url", f"{index.rstrip('/')}/simple/", *wheels]]
    code = next((c for c in (subprocess.run(s).returncode for s in steps) if c), 0)
    if code:
        return row("failed", f"pip install --no-deps --only-binary :all: {' '.join(wheels)} from "
                             f"the local index: exit status {code}")
    return row("ran", f"{len(served)} files served as uploaded (sha256); pip installed "
                      f"{', '.join(wheels)}; sdist only, fetched, not built: "
                      f"{', '.join(sdist_only) or 'none'}")
