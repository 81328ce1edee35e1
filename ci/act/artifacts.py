"""The artifact and publishing stand-ins' one script (standard library only: it runs on the host
and inside the image). Behaves as actions/upload-artifact and actions/download-artifact do with
the inputs the generated workflows use, over a folder instead of GitHub's artifact service:

    artifacts.py upload      NAME, PATHS (one per line, globs, !exclusions), IF_NO_FILES_FOUND
    artifacts.py download    NAME or PATTERN, DEST
    artifacts.py attest      SUBJECT (a glob): lists what would be attested, signs nothing

The inputs come as environment variables (INPUT_*), the store is $OPFORGE_ACT_ARTIFACTS.
An uploaded artifact keeps the paths below the least common ancestor of its files, as upload-artifact's.
"""
from __future__ import annotations

import fnmatch
import glob
import os
import shutil
import sys
from pathlib import Path

ARTIFACT = "opforge act (stand-in)"


def _store() -> Path:
    store = os.environ.get("OPFORGE_ACT_ARTIFACTS")
    if not store:
        raise SystemExit(f"{ARTIFACT}: OPFORGE_ACT_ARTIFACTS is not set (nox -s act sets it)")
    return Path(store)


def matched_files(lines: str, root: Path) -> list[Path]:
    """The files the `path:` input names: globs and folders (recursively), less `!` patterns."""
    include: set[Path] = set()
    exclude: list[str] = []
    for line in filter(None, (raw.strip() for raw in lines.splitlines())):
        if line.startswith("!"):
            exclude.append(str(root / line[1:]))
            continue
        for hit in glob.glob(str(root / line), recursive=True):
            found = Path(hit)
            include |= {p for p in found.rglob("*") if p.is_file()} if found.is_dir() else {found}
    return sorted(p for p in include
                  if not any(fnmatch.fnmatch(str(p), pattern) for pattern in exclude))


def common_root(files: list[Path]) -> Path:
    """The least common ancestor folder of the files (upload-artifact's artifact root)."""
    return Path(os.path.commonpath([str(f.parent) for f in files]))


def upload(name: str, lines: str, if_none: str, root: Path, store: Path) -> int:
    files = matched_files(lines, root)
    if not files:
        message = f"{ARTIFACT}: no files were found with the provided path: {lines.strip()!r}"
        if if_none == "error":
            print(f"::error::{message}")
            return 1
        if if_none == "warn":
            print(f"::warning::{message}. No artifact will be uploaded.")
        return 0
    target = store / name
    if target.exists():
        print(f"::error::{ARTIFACT}: an artifact named {name!r} already exists in this run")
        return 1
    base = common_root(files)
    for file in files:
        destination = target / file.relative_to(base)
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(file, destination)
    print(f"{ARTIFACT}: uploaded {len(files)} file(s) as {name!r} to {target}")
    return 0


def download(name: str, pattern: str, dest: Path, store: Path) -> int:
    if name:
        if not (store / name).is_dir():
            print(f"::error::{ARTIFACT}: artifact {name!r} not found (uploaded: "
                  f"{sorted(p.name for p in store.glob('*'))})")
            return 1
        shutil.copytree(store / name, dest, dirs_exist_ok=True)
        print(f"{ARTIFACT}: downloaded {name!r} into {dest}")
        return 0
    found = sorted(p for p in store.glob("*") if fnmatch.fnmatch(p.name, pattern or "*"))
    for artifact in found:          # several artifacts: each into its own folder, as v4+ does
        shutil.copytree(artifact, dest / artifact.name, dirs_exist_ok=True)
    print(f"{ARTIFACT}: downloaded {len(found)} artifact(s) matching {pattern!r} into {dest}")
    return 0


def attest(subject: str, root: Path) -> int:
    files = sorted(Path(p) for p in glob.glob(str(root / subject)) if Path(p).is_file())
    if not files:
        print(f"::error::{ARTIFACT}: subject-path {subject!r} matches no file")
        return 1
    print(f"{ARTIFACT}: skipped: build provenance needs GitHub's OIDC token (id-token: write) and "
          f"Sigstore; it would attest {len(files)} file(s):")
    for file in files:
        print(f"  {file.relative_to(root)}")
    return 0


def main(argv: list[str]) -> int:
    env = os.environ
    root = Path(env.get("GITHUB_WORKSPACE", "."))
    command = argv[0] if argv else ""
    if command == "upload":
        return upload(env["INPUT_NAME"], env["INPUT_PATH"], env.get("INPUT_IF_NO_FILES_FOUND", "warn"),
                      root, _store())
    if command == "download":
        return download(env.get("INPUT_NAME", ""), env.get("INPUT_PATTERN", ""),
                        root / env.get("INPUT_PATH", "."), _store())
    if command == "attest":
        return attest(env["INPUT_SUBJECT_PATH"], root)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
