"""docker/apt.lock: every Debian package of opforge's image, at its exact version.

    python -m ci.aptlock lock                      # resolve the lock (nox -s apt_lock)
    python -m ci.aptlock check --part base --admindir ROOTFS/var/lib/dpkg
    python3 ci/aptlock.py check --part image       # inside the image (the Dockerfile runs it)

`lock` resolves the lock from matrix.yaml `container:` (the Debian release and the packages the
Dockerfile installs) and the mirror's signed indexes, fetched by apt-get into a private folder and
parsed with python-debian: part `base` is what `debootstrap --variant=minbase` installs from the
release, part `image` the whole set after the Dockerfile's `apt-get install` (release, -updates,
-security). The only point in time a Debian mirror states is each index's InRelease `Date:`; the
lock records it (Debian's snapshot archive, which would make old dates installable, is not
reachable from our build machines).

`check` compares what dpkg has installed with one part of the lock and names every package that
differs. It needs only the standard library: it runs inside the image before any venv exists.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ci.provision import apt
from ci.provision.apt import LOCK, PARTS, REFRESH, Lock, Locked, LockError, load
from ci.provision.debian import cache_root, mirror, security_mirror

# python-debian (`debian`) is imported where the lock is resolved (nox -s apt_lock): `check` runs
# with the standard library alone, inside the image before any venv exists.

# -------------------------------------------------------------------------------- the check


def installed(admindir: str | None = None) -> dict[str, str]:
    """Installed package -> version, from dpkg-query (of another root with admindir)."""
    command = ["dpkg-query", "-W", "-f", "${Package} ${Version} ${db:Status-Abbrev}\n"]
    if admindir:
        command.insert(1, f"--admindir={admindir}")
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return parse_installed(output)


def parse_installed(output: str) -> dict[str, str]:
    """dpkg-query lines `name version status` -> {name: version} of the installed ones (`ii`)."""
    found = {}
    for line in output.splitlines():
        fields = line.split()
        if len(fields) == 3 and fields[2] == "ii":
            found[fields[0]] = fields[1]
    return found


def differences(locked: Mapping[str, Locked], found: Mapping[str, str]) -> list[str]:
    """One line per package whose installed version is not the locked one."""
    lines = []
    for name in sorted(set(locked) | set(found)):
        want = locked[name].version if name in locked else None
        have = found.get(name)
        if want == have:
            continue
        locked_text = f"locked {want}" if want else "not locked"
        lines.append(f"  {name}: {locked_text}, " + (f"found {have}" if have else "not installed"))
    return lines


def check(lock: Lock, part: str, found: Mapping[str, str], source: str = "docker/apt.lock") -> None:
    """Raise LockError naming every package of `part` that differs from what is installed."""
    problems = differences(lock.parts[part], found)
    if problems:
        raise LockError(
            f"opforge: {source} (part {part}, Debian {lock.release}): {len(problems)} installed "
            "package(s) differ from the lock:\n" + "\n".join(problems) + "\n"
            "The mirror moved on (a point release or a security update replaced a locked "
            f"version) or matrix.yaml container.apt changed; {REFRESH}")


# ------------------------------------------------------------------------------ resolving


@dataclass(frozen=True)
class Candidate:
    name: str
    version: str
    architecture: str
    suite: str
    priority: str
    depends: tuple[tuple[str, ...], ...]               # groups of alternatives (names only)
    provides: tuple[str, ...]


class Index:
    """The packages of some suites, the highest version of each (as apt's candidate)."""

    def __init__(self, candidates: Iterable[Candidate]):
        from debian.debian_support import Version  # noqa: PLC0415  (python-debian: see above)

        self.best: dict[str, Candidate] = {}
        for candidate in candidates:
            current = self.best.get(candidate.name)
            if current is None or Version(candidate.version) > Version(current.version):
                self.best[candidate.name] = candidate
        self.providers: dict[str, list[str]] = {}
        for candidate in self.best.values():
            for virtual in candidate.provides:
                self.providers.setdefault(virtual, []).append(candidate.name)

    def __getitem__(self, name: str) -> Candidate:
        if name not in self.best:
            raise LockError(f"Debian package {name!r}: not in the mirror's indexes "
                            f"({', '.join(sorted({c.suite for c in self.best.values()}))})")
        return self.best[name]


def candidates(paragraphs: Iterable[Mapping[str, str]], suite: str, arch: str) -> list[Candidate]:
    """The Candidates of one Packages index (python-debian paragraphs) for `arch` (and `all`)."""
    from debian.deb822 import PkgRelation  # noqa: PLC0415  (python-debian: see above)

    found = []
    for paragraph in paragraphs:
        if paragraph.get("Architecture") not in (arch, "all"):
            continue
        depends = tuple(tuple(alternative["name"] for alternative in group)
                        for field in ("Pre-Depends", "Depends") if paragraph.get(field)
                        for group in PkgRelation.parse_relations(paragraph[field]))
        provides = tuple(group[0]["name"] for field in ("Provides",) if paragraph.get(field)
                         for group in PkgRelation.parse_relations(paragraph[field]))
        found.append(Candidate(paragraph["Package"], paragraph["Version"],
                               paragraph["Architecture"], suite, paragraph.get("Priority", ""),
                               depends, provides))
    return found


def debootstrap_set(index: Index, release: str) -> set[str]:
    """What `debootstrap --variant=minbase RELEASE` installs: Priority required, apt and (bookworm)
    usr-is-merged, closed over the FIRST alternative of every Depends/Pre-Depends, keeping only real
    packages (debootstrap's resolve_deps; it ignores versions and virtual packages)."""
    wanted = {name for name, c in index.best.items() if c.priority == "required"} | {"apt"}
    excluded = {"usrmerge"}
    if release == "bookworm":
        wanted.add("usr-is-merged")
    chosen: set[str] = set()
    queue = sorted(wanted)
    while queue:
        name = queue.pop()
        if name in chosen or name in excluded or name not in index.best:
            continue
        chosen.add(name)
        queue.extend(group[0] for group in index[name].depends)
    return chosen


def apt_install_set(index: Index, installed_names: set[str], requested: Iterable[str]) -> set[str]:
    """What `apt-get install --no-install-recommends REQUESTED` adds to `installed_names`: a group of
    alternatives is satisfied by a member (or a provider of it) already present, else apt takes the
    first alternative it can install, a real package before a virtual one's provider."""
    chosen = set(installed_names)
    queue = list(requested)
    while queue:
        name = queue.pop(0)
        if name in chosen:
            continue
        chosen.add(name)
        for group in index[name].depends:
            if _satisfied(index, chosen, group):
                continue
            queue.append(_first_installable(index, group, name))
    return chosen


def _satisfied(index: Index, chosen: set[str], group: tuple[str, ...]) -> bool:
    return any(name in chosen or any(p in chosen for p in index.providers.get(name, ()))
               for name in group)


def _first_installable(index: Index, group: tuple[str, ...], needed_by: str) -> str:
    for name in group:
        if name in index.best:
            return name
    for name in group:
        if index.providers.get(name):
            return sorted(index.providers[name])[0]
    raise LockError(f"Debian package {needed_by}: no package satisfies its dependency "
                    f"{' | '.join(group)} in the mirror's indexes")


def resolve(index_by_suite: Mapping[str, Iterable[Candidate]], release: str,
            requested: tuple[str, ...], indexes: tuple[tuple[str, str, str], ...]) -> Lock:
    """The lock of `release` plus `requested`: part base from the release's own index (what
    debootstrap sees), part image from every suite's (what apt-get in the image sees)."""
    base_index = Index(index_by_suite[release])
    image_index = Index(c for cs in index_by_suite.values() for c in cs)
    base = debootstrap_set(base_index, release)
    image = apt_install_set(image_index, base, requested)

    def entries(index: Index, names: set[str]) -> dict[str, Locked]:
        return {name: Locked(name, index[name].version, index[name].architecture,
                             index[name].suite) for name in names}

    return Lock(release, requested, indexes, {"base": entries(base_index, base),
                                              "image": entries(image_index, image)})


# ------------------------------------------------------------------ the mirror, through apt-get


def suites(release: str) -> list[str]:
    """The suites the image's sources list names (docker/build.sh writes the same three)."""
    return [release, f"{release}-updates", f"{release}-security"]


def fetch_indexes(release: str, state: Path) -> tuple[dict[str, list[Candidate]],
                                                      tuple[tuple[str, str, str], ...]]:
    """apt-get update (signatures checked against Debian's keyring) into `state`, then each
    suite's Candidates and its InRelease (suite, Version, Date)."""
    from debian import deb822  # noqa: PLC0415  (python-debian: see above)

    options = _apt_options(release, state)
    subprocess.run(["apt-get", *options, "update"], check=True, stdout=subprocess.DEVNULL)
    arch = subprocess.run(["dpkg", "--print-architecture"], check=True, capture_output=True,
                          text=True).stdout.strip()
    targets = subprocess.run(["apt-get", *options, "indextargets", "Created-By: Packages"],
                             check=True, capture_output=True, text=True).stdout
    by_suite: dict[str, list[Candidate]] = {}
    indexes = []
    for target in deb822.Deb822.iter_paragraphs(targets.splitlines(), use_apt_pkg=False):
        suite = target["Codename"]
        packages = Path(target["Filename"])
        with packages.open() as stream:
            by_suite[suite] = candidates(deb822.Packages.iter_paragraphs(stream, use_apt_pkg=False), suite, arch)
        in_release = packages.with_name(
            packages.name[: -len(target["MetaKey"])].replace("/", "_") + "InRelease")
        stanza = deb822.Release(in_release.read_text())      # the PGP armour is skipped
        indexes.append((suite, stanza["Version"], stanza["Date"]))
    missing = [s for s in suites(release) if s not in by_suite]
    if missing:
        raise LockError(f"the mirror gave no Packages index for {', '.join(missing)}")
    return by_suite, tuple(sorted(indexes, key=lambda i: suites(release).index(i[0])))


def _apt_options(release: str, state: Path) -> list[str]:
    stanzas = [apt.stanza(mirror(), f"{release} {release}-updates", "main"),
               apt.stanza(security_mirror(), f"{release}-security", "main")]
    return apt.options(state, "image", stanzas, "-o", "Acquire::GzipIndexes=false",
                       "-o", "Acquire::Languages=none", "-o", "Dir::Etc::Preferences=/dev/null",
                       "-o", "Dir::Etc::PreferencesParts=/dev/null")


def lock_from_mirror(container: Mapping) -> Lock:
    release, requested = container["debian"], tuple(container["apt"])
    by_suite, indexes = fetch_indexes(release, cache_root() / "debian" / f"lock-{release}")
    return resolve(by_suite, release, requested, indexes)


def stale(lock: Lock, container: Mapping, source: str = "docker/apt.lock") -> str | None:
    """Why the lock does not belong to matrix.yaml's container section (None when it does)."""
    if lock.release != container.get("debian"):
        return (f"{source}: locks Debian {lock.release}, matrix.yaml container.debian is "
                f"{container.get('debian')}; {REFRESH}")
    if list(lock.apt) != list(container.get("apt", ())):
        return (f"{source}: locks apt packages {' '.join(lock.apt)}, matrix.yaml container.apt "
                f"is {' '.join(container.get('apt', ()))}; {REFRESH}")
    return None


# ---------------------------------------------------------------------------------- command


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ci.aptlock", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    lock_cmd = commands.add_parser("lock", help="resolve docker/apt.lock from the mirror")
    lock_cmd.add_argument("--output", type=Path, default=LOCK)
    check_cmd = commands.add_parser("check", help="compare the installed packages with the lock")
    check_cmd.add_argument("--part", choices=PARTS, default="image")
    check_cmd.add_argument("--admindir", help="dpkg's database of another root (ROOT/var/lib/dpkg)")
    check_cmd.add_argument("--installed", type=Path,
                           help="a file of `dpkg-query -W -f '${Package} ${Version} "
                                "${db:Status-Abbrev}\\n'` output instead of asking dpkg")
    check_cmd.add_argument("--lock", type=Path, default=LOCK)
    args = parser.parse_args(argv)
    try:
        if args.command == "lock":
            return _lock_command(args.output)
        lock = load(args.lock)
        found = (parse_installed(args.installed.read_text()) if args.installed
                 else installed(args.admindir))
        check(lock, args.part, found, str(args.lock))
        print(f"opforge: {args.lock}: the {len(found)} installed Debian packages match part "
              f"{args.part}", file=sys.stderr)
        return 0
    except LockError as exc:
        print(exc, file=sys.stderr)
        return 1


def _lock_command(output: Path) -> int:
    # Only `lock` reads matrix.yaml (pydantic); `check` runs with the standard library alone.
    from ci import model as mx  # noqa: PLC0415

    container = mx.load().data["container"]
    lock = lock_from_mirror(container)
    output.write_text(lock.render())
    print(f"opforge: wrote {output}: {len(lock.parts['base'])} base, {len(lock.parts['image'])} "
          f"image packages; indexes: " + "; ".join(f"{s} {v} ({d})" for s, v, d in lock.indexes),
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
