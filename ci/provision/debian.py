"""Fetch a pinned Debian package from another suite and unpack it into opforge's cache.

Nothing is installed into the system: the package is downloaded with apt-get against a private
sources list and unpacked with `dpkg -x`. Used for ONNX Runtime headers (libonnxruntime-dev: the
OPFORGE_ORT_INCLUDE_DIR the nox sessions and the matrix pass to packages/ort_plugin;
`python -m ci.debian --ort-include` prints it) and the relocated CUDA 12.4 toolkit, both from
Debian trixie.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from ci.provision import apt

SYSTEM_SOURCES = Path("/etc/apt/sources.list.d/debian.sources")


def cache_root() -> Path:
    base = os.environ.get("OPFORGE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "opforge")
    return Path(base)


MIRROR_ENV, SECURITY_ENV = "OPFORGE_DEBIAN_MIRROR", "OPFORGE_DEBIAN_SECURITY_MIRROR"


def _is_debian() -> bool:
    try:
        text = Path("/etc/os-release").read_text()
        fields = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    except OSError:
        return False
    return fields.get("ID", "").strip('"') == "debian"


def mirror() -> str:
    """The Debian mirror: $OPFORGE_DEBIAN_MIRROR, else the one this Debian machine already uses
    (never hard-coded in the repo). Another distribution's mirror would not do: an Ubuntu runner
    (the image job on GitHub) sets the variable."""
    if os.environ.get(MIRROR_ENV):
        return os.environ[MIRROR_ENV]
    if not _is_debian():
        raise RuntimeError(f"opforge: this machine is not Debian, so its apt mirror cannot serve "
                           f"Debian packages: set {MIRROR_ENV} to a Debian mirror's URL")
    if SYSTEM_SOURCES.exists():
        for line in SYSTEM_SOURCES.read_text().splitlines():
            if line.startswith("URIs:") and "security" not in line:
                return line.split(":", 1)[1].strip()
    for listfile in Path("/etc/apt").glob("sources.list*"):
        if listfile.is_file():
            for line in listfile.read_text().splitlines():
                parts = line.split()
                if len(parts) >= 3 and parts[0] == "deb" and "security" not in parts[1]:
                    return parts[1]
    raise RuntimeError("opforge: no Debian mirror found in /etc/apt; cannot fetch Debian packages")


def security_mirror() -> str:
    """The mirror of Debian's security suites: $OPFORGE_DEBIAN_SECURITY_MIRROR, else the one this
    machine uses (docker/build.sh adds the same)."""
    if os.environ.get(SECURITY_ENV):
        return os.environ[SECURITY_ENV]
    if SYSTEM_SOURCES.exists():
        for line in SYSTEM_SOURCES.read_text().splitlines():
            if line.startswith("URIs:") and "security" in line:
                return line.split(":", 1)[1].strip()
    raise RuntimeError(f"opforge: no Debian security mirror in {SYSTEM_SOURCES}: set "
                       f"{SECURITY_ENV}; cannot lock the image's packages")


def _apt_options(state: Path, suite: str) -> list[str]:
    (state / "archives" / "partial").mkdir(parents=True, exist_ok=True)
    return apt.options(state, suite, [apt.stanza(mirror(), suite, "main contrib non-free")],
                       "-o", f"Dir::Cache::Archives={state / 'archives'}",
                       "-o", "APT::Get::List-Cleanup=0")


def fetch(package: str, version: str, suite: str = "trixie") -> Path:
    """Return the folder holding `package=version` unpacked; download it on first use."""
    target = cache_root() / "debian" / f"{package}_{version.replace(':', '%3a')}"
    done = target / ".unpacked"
    if done.exists():
        return target
    state = cache_root() / "debian" / f"apt-{suite}"
    options = _apt_options(state, suite)
    download_dir = state / "debs"
    download_dir.mkdir(parents=True, exist_ok=True)
    print(f"opforge: fetching Debian {suite} package {package}={version}", file=sys.stderr)
    if not any((state / "lists").glob("*Packages*")):
        subprocess.run(["apt-get", *options, "update"], check=True, stdout=subprocess.DEVNULL)
    result = subprocess.run(["apt-get", *options, "download", f"{package}={version}"],
                            cwd=download_dir, capture_output=True, text=True)
    if result.returncode != 0:
        # The lists may be stale (a newer upload replaced the pinned version): refresh once.
        subprocess.run(["apt-get", *options, "update"], check=True, stdout=subprocess.DEVNULL)
        result = subprocess.run(["apt-get", *options, "download", f"{package}={version}"],
                                cwd=download_dir, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"opforge: cannot download Debian {suite} package {package}={version}: "
                           f"{result.stderr.strip()}")
    deb = next(download_dir.glob(f"{package}_*.deb"))
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    subprocess.run(["dpkg", "-x", str(deb), str(target)], check=True)
    done.touch()
    return target


def ort_include_dir(matrix: Any) -> Path:
    """The folder of ONNX Runtime's C headers that the builds get as OPFORGE_ORT_INCLUDE_DIR: the
    Debian package matrix.yaml pins in `sources.ort_headers` (no PyPI package carries them)."""
    spec = matrix.data["sources"]["ort_headers"]
    root = fetch(spec["package"], spec["version"], spec["debian_suite"])
    return root / "usr" / "include" / "onnxruntime"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("package", nargs="?", help="a Debian package (with version)")
    parser.add_argument("version", nargs="?")
    parser.add_argument("--suite", default="trixie")
    parser.add_argument("--ort-include", action="store_true",
                        help="print the ORT header folder matrix.yaml pins (for OPFORGE_ORT_INCLUDE_DIR)")
    args = parser.parse_args(argv)
    if args.ort_include:
        # Only this reads matrix.yaml (pydantic): fetch runs where the standard library is all.
        from ci import model  # noqa: PLC0415

        print(ort_include_dir(model.load()))
    elif args.package and args.version:
        print(fetch(args.package, args.version, args.suite))
    else:
        parser.error("give PACKAGE VERSION or --ort-include")
    return 0


if __name__ == "__main__":
    sys.exit(main())
