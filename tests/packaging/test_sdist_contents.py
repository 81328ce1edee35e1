"""An sdist holds the package's tracked sources and nothing else, wherever it is made.

Each package's tracked files (`git ls-files`) are copied into a temporary folder, junk a working
checkout gathers is planted beside them (dist/, .venv/, build/ with a CMakeCache, built .so files,
__pycache__, and symlinks leaving the package: to an absolute path, to `../README.md`, to a folder
outside), and `python -m build --sdist` of that copy must pack exactly the tracked files, plus
the metadata the backend writes (PKG-INFO; setuptools' egg-info and setup.cfg). Sdists only, no
wheels: seconds each (the backends come from PyPI, opforge-spec from its wheel built here).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FOLDERS = {"kernels": REPO / "kernels", **{p: REPO / "packages" / p for p in
           ("align", "loader", "ort_plugin", "trt_plugin", "torch_ext")}}
NEEDS_TORCH = ("torch_ext",)    # setup.py imports torch: made without isolation (its README)
# Inputs a caller's environment may hold that change what a backend does: none reaches the build.
BUILD_KNOBS = ("OPFORGE_", "SKBUILD_", "CMAKE_", "PYTHONPATH", "HATCH_", "SETUPTOOLS_SCM_")

pytest.importorskip("build", reason="`python -m build` is not installed here (pip install build)")


def tracked(folder: Path) -> list[str]:
    """The folder's files in git, relative to it (those present in the working tree)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--", "."], cwd=folder, capture_output=True)
    if listed.returncode != 0:
        pytest.skip(f"not a git checkout: {listed.stderr.decode().strip()}")
    names = [name.decode() for name in listed.stdout.split(b"\0") if name]
    return sorted(name for name in names if (folder / name).is_file())


def generated(name: str) -> bool:
    """Metadata the backend writes into every sdist (not a source): PKG-INFO; setuptools' setup.cfg
    and the egg-info of torch_ext's import package."""
    return name in ("PKG-INFO", "setup.cfg") or name.startswith("src/opforge_torch.egg-info/")


def plant_junk(root: Path, package: Path) -> None:
    """What a working checkout holds beside a package's sources after builds and venvs."""
    (root / "README.md").write_text("the repository's README\n")
    (root / "outside").mkdir()
    (root / "outside" / "secret.txt").write_text("outside the package\n")
    for name in ("dist/opforge_old-0.0.1.tar.gz", ".venv/bin/python", ".venv/lib/site.py",
                 "build/CMakeCache.txt", "build/lib/libopforge.so.1", "libjunk.so",
                 "__pycache__/setup.cpython-311.pyc", "notes.egg-info/PKG-INFO"):
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text("junk\n")
    sources = import_package(package)
    (sources / "_built.so").write_text("junk\n")
    (sources / "__pycache__").mkdir(exist_ok=True)
    (sources / "__pycache__" / "x.cpython-311.pyc").write_text("junk\n")
    for ignored in ignored_names(package):     # what the package's own .gitignore names
        (package / ignored).parent.mkdir(parents=True, exist_ok=True)
        (package / ignored).write_text("junk\n")
    (package / "README-of-the-repo.md").symlink_to("../README.md")
    (package / "absolute-link.txt").symlink_to(root / "outside" / "secret.txt")
    (package / "linked-folder").symlink_to(root / "outside", target_is_directory=True)


def import_package(package: Path) -> Path:
    """The folder of the package's top-level __init__.py (src/opforge_align, opforge_spec)."""
    return min((p.parent for p in package.rglob("__init__.py") if ".venv" not in p.parts),
               key=lambda folder: len(folder.parts))


def ignored_names(package: Path) -> list[str]:
    """The plain names (no wildcards) a package's .gitignore lists; a folder gets a file inside."""
    ignore = package / ".gitignore"
    lines = ignore.read_text().splitlines() if ignore.is_file() else []
    names = [line.strip().strip("/") + ("/junk.txt" if line.strip().endswith("/") else "")
             for line in lines if line.strip() and not line.startswith(("#", "!"))]
    return [name for name in names if not any(c in name for c in "*?[")]


def copy_with_junk(folder: Path, root: Path) -> Path:
    package = root / folder.name
    for name in tracked(folder):
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(folder / name, package / name)
    plant_junk(root, package)
    return package


def build_env(links: Path, package: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(BUILD_KNOBS)}
    env["PIP_FIND_LINKS"] = " ".join(filter(None, [str(links), os.environ.get("PIP_FIND_LINKS")]))
    if package in NEEDS_TORCH:   # its setup.py finds the headers to declare its extension
        env["OPFORGE_KERNELS_INCLUDE_DIR"] = str(REPO / "kernels" / "include")
    return env


def members(sdist: Path) -> list[str]:
    """The sdist's files and links, relative to its top folder."""
    with tarfile.open(sdist) as archive:
        names = [m.name.split("/", 1)[1] for m in archive.getmembers() if not m.isdir() and "/" in m.name]
    return sorted(names)


@pytest.fixture(scope="module")
def links(tmp_path_factory) -> Path:
    """opforge-spec's wheel (not on PyPI): a build requirement of the CMake packages."""
    out = tmp_path_factory.mktemp("links")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check",
                           "-w", str(out), str(FOLDERS["kernels"])], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def make_sdist(package: str, copy: Path, links: Path, out: Path) -> subprocess.CompletedProcess:
    if package in NEEDS_TORCH:
        pytest.importorskip("torch", reason="torch_ext's sdist is made with this environment's torch")
    isolation = ["--no-isolation", "--skip-dependency-check"] if package in NEEDS_TORCH else []
    return subprocess.run([sys.executable, "-m", "build", "--sdist", *isolation, "--outdir", str(out),
                           str(copy)], cwd=out.parent, capture_output=True, text=True,
                          env=build_env(links, package), timeout=900)


@pytest.mark.parametrize("package", list(FOLDERS))
def test_the_sdist_packs_the_tracked_files_and_nothing_else(package, links, tmp_path):
    copy = copy_with_junk(FOLDERS[package], tmp_path / "checkout")
    done = make_sdist(package, copy, links, tmp_path / "dist")
    assert done.returncode == 0, f"{package}: sdist failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    (sdist,) = (tmp_path / "dist").glob("*.tar.gz")
    packed = [name for name in members(sdist) if not generated(name)]
    expected = tracked(FOLDERS[package])
    extra, missing = sorted(set(packed) - set(expected)), sorted(set(expected) - set(packed))
    assert not extra and not missing, (f"{package}: {sdist.name} packs {extra or 'nothing'} beyond "
                                       f"its tracked files and lacks {missing or 'none'}")


@pytest.mark.parametrize("package", list(FOLDERS))
def test_a_symlink_among_the_sources_fails_the_sdist_naming_it(package, links, tmp_path):
    """Inside a folder the sdist packs, a link out of the package is neither followed nor stored:
    the sdist is refused, and says which link."""
    copy = copy_with_junk(FOLDERS[package], tmp_path / "checkout")
    link = import_package(copy) / "stray.py"
    link.symlink_to(os.path.relpath(tmp_path / "checkout" / "README.md", link.parent))
    done = make_sdist(package, copy, links, tmp_path / "dist")
    assert done.returncode != 0 and not list((tmp_path / "dist").glob("*.tar.gz")), (
        f"{package}: an sdist was made with {link.relative_to(copy)} in its sources")
    assert "stray.py" in done.stdout + done.stderr, done.stdout[-2000:] + done.stderr[-2000:]
