"""ci/generate/aptlock.py: the image's apt lock — resolving it from a real excerpt of Debian bookworm's
Packages index, reading and writing it, checking an installed set against it, and its staleness
against matrix.yaml. The slow test debootstraps a real minbase root and checks it."""
from __future__ import annotations

import copy
import dataclasses
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ci import model as mx
from ci.generate import aptlock, workflows
from ci.provision import apt, container, debian, venvs

GOLDEN = Path(__file__).resolve().parent / "golden"
LOCK = GOLDEN / "docker" / "apt.lock"
# bookworm's stanzas of adduser's closure (+ cdebconf, the other provider of debconf-2.0), only
# the fields the resolver reads, as the mirror served them on 2026-11-30.
EXCERPT = GOLDEN / "debian" / "Packages-adduser"
ADDUSER_CLOSURE = {
    "adduser", "debconf", "gcc-12-base", "libaudit-common", "libaudit1", "libbz2-1.0", "libc6",
    "libcap-ng0", "libcrypt1", "libdb5.3", "libgcc-s1", "libpam-modules", "libpam-modules-bin",
    "libpam0g", "libpcre2-8-0", "libselinux1", "libsemanage-common", "libsemanage2", "libsepol2",
    "passwd"}


@pytest.fixture(scope="module")
def excerpt() -> list[aptlock.Candidate]:
    deb822 = pytest.importorskip("debian.deb822", reason="python-debian (tools: in matrix.yaml)")
    with EXCERPT.open() as stream:
        paragraphs = deb822.Packages.iter_paragraphs(stream, use_apt_pkg=False)
        return aptlock.candidates(paragraphs, "bookworm", "amd64")


@pytest.fixture(scope="module")
def lock() -> aptlock.Lock:
    return aptlock.load(LOCK)


# ----------------------------------------------------------------------------- resolving


def test_apt_takes_the_first_alternative_and_every_dependency(excerpt):
    index = aptlock.Index(excerpt)
    assert aptlock.apt_install_set(index, set(), ["adduser"]) == ADDUSER_CLOSURE
    # passwd needs `debconf (>= 0.5) | debconf-2.0`: the real package, not the other provider
    assert "cdebconf" not in aptlock.apt_install_set(index, set(), ["passwd"])


def test_an_alternative_already_present_satisfies_the_group(excerpt):
    index = aptlock.Index(excerpt)
    chosen = aptlock.apt_install_set(index, {"cdebconf"}, ["passwd"])
    assert "debconf" not in chosen      # cdebconf provides debconf-2.0


def test_a_virtual_alternative_takes_its_provider(excerpt):
    without_debconf = [c for c in excerpt if c.name != "debconf"]
    index = aptlock.Index(without_debconf)
    # apt takes the provider cdebconf, which needs libraries the excerpt lacks: named
    with pytest.raises(aptlock.LockError, match=r"Debian package cdebconf: no package satisfies "
                                                r"its dependency libdebian-installer4"):
        aptlock.apt_install_set(index, set(), ["passwd"])
    with pytest.raises(aptlock.LockError, match=r"Debian package 'vim': not in the mirror's "
                                                r"indexes \(bookworm\)"):
        aptlock.apt_install_set(index, set(), ["vim"])


def test_debootstrap_keeps_required_packages_and_real_first_alternatives(excerpt):
    index = aptlock.Index(excerpt)
    required = {c.name for c in excerpt if c.priority == "required"}
    chosen = aptlock.debootstrap_set(index, "bookworm")
    assert required <= chosen
    assert "adduser" not in chosen and "cdebconf" not in chosen  # important / optional
    for name in chosen:                       # closed over first alternatives that exist
        for group in index[name].depends:
            assert group[0] in chosen or group[0] not in index.best


def test_the_highest_version_wins_epochs_included(excerpt):
    libc6 = next(c for c in excerpt if c.name == "libc6")
    older = dataclasses.replace(libc6, version="9.0-1", suite="bookworm")
    newer = dataclasses.replace(libc6, version="1:2.0-1", suite="bookworm-security")
    assert aptlock.Index([older, newer])["libc6"].suite == "bookworm-security"
    assert aptlock.Index([newer, older])["libc6"].version == "1:2.0-1"


def test_resolve_splits_base_and_image(excerpt):
    indexes = (("bookworm", "12.15", "Sat, 11 Jul 2026 10:16:37 UTC"),)
    lock = aptlock.resolve({"bookworm": excerpt}, "bookworm", ("adduser",), indexes)
    assert set(lock.parts["base"]) <= set(lock.parts["image"])
    assert "adduser" in lock.parts["image"] and "adduser" not in lock.parts["base"]
    assert apt.parse(lock.render()) == lock


# ----------------------------------------------------------------------- the file and the check


def test_the_golden_lock_reads_and_renders_back(lock):
    assert lock.release == "bookworm" and "g++" in lock.apt
    assert [suite for suite, _, _ in lock.indexes] == aptlock.suites("bookworm")
    assert len(lock.parts["base"]) == 88          # what debootstrap installed (the slow test)
    assert set(lock.parts["base"]) <= set(lock.parts["image"])
    assert lock.render() == LOCK.read_text()
    assert "libc6=2.36-9+deb12u14" in lock.pins("image")


def test_an_unreadable_line_is_named(lock):
    text = lock.render().replace("base dash ", "base dash-without-fields\nbase dash ", 1)
    with pytest.raises(aptlock.LockError, match=r"apt\.lock:\d+: cannot read 'base "
                                                r"dash-without-fields'.*nox -s apt_lock"):
        apt.parse(text)


def test_parse_installed_keeps_installed_packages_only():
    output = ("libc6 2.36-9+deb12u14 ii \nold-conf 1.0 rc \nhalf 2.0 iU \n"
              "mawk 1.3.4.20200120-3.1 ii \n")
    assert aptlock.parse_installed(output) == {"libc6": "2.36-9+deb12u14",
                                               "mawk": "1.3.4.20200120-3.1"}


def test_check_passes_on_the_locked_set(lock):
    found = {name: p.version for name, p in lock.parts["image"].items()}
    aptlock.check(lock, "image", found)


def test_check_names_each_package_that_differs(lock):
    found = {name: p.version for name, p in lock.parts["base"].items()}
    found["libc6"] = "2.36-9+deb12u15"
    del found["mawk"]
    found["vim-tiny"] = "2:9.0.1378-2"
    with pytest.raises(aptlock.LockError) as caught:
        aptlock.check(lock, "base", found)
    message = str(caught.value)
    assert "(part base, Debian bookworm): 3 installed package(s) differ" in message
    assert "  libc6: locked 2.36-9+deb12u14, found 2.36-9+deb12u15\n" in message
    assert "  mawk: locked 1.3.4.20200120-3.1, not installed\n" in message
    assert "  vim-tiny: not locked, found 2:9.0.1378-2\n" in message
    assert "nox -s apt_lock" in message


def test_check_command_reads_a_dpkg_query_listing(tmp_path, lock, capsys):
    listing = tmp_path / "installed.txt"
    listing.write_text("".join(f"{n} {p.version} ii \n" for n, p in lock.parts["base"].items()))
    assert aptlock.main(["check", "--part", "base", "--lock", str(LOCK),
                         "--installed", str(listing)]) == 0
    listing.write_text(listing.read_text().replace("dash 0.5.12-2 ii", "dash 0.5.12-3 ii"))
    assert aptlock.main(["check", "--part", "base", "--lock", str(LOCK),
                         "--installed", str(listing)]) == 1
    assert "  dash: locked 0.5.12-2, found 0.5.12-3" in capsys.readouterr().err


# ---------------------------------------------------------------- matrix.yaml and the Dockerfile


def test_a_lock_of_another_apt_list_is_stale(lock):
    assert aptlock.stale(lock, {"debian": "bookworm", "apt": list(lock.apt)}) is None
    assert "container.debian is trixie" in aptlock.stale(lock, {"debian": "trixie",
                                                                "apt": list(lock.apt)})
    problem = aptlock.stale(lock, {"debian": "bookworm", "apt": [*lock.apt, "vim"]})
    assert "matrix.yaml container.apt is" in problem and "nox -s apt_lock" in problem


def test_the_dockerfile_installs_the_locked_versions(lock):
    text = workflows.dockerfile(mx.load(GOLDEN / "matrix.yaml"))
    for pin in lock.pins("image"):
        assert f" {pin} " in text or f" {pin}\n" in text, pin
    assert "#   bookworm 12.15, Sat, 11 Jul 2026 10:16:37 UTC" in text
    assert "aptlock.py check --part image" in text
    assert "hadolint ignore=DL3008" not in text    # every apt package carries its version


def test_the_dockerfile_refuses_a_stale_lock():
    data = copy.deepcopy(mx.read_yaml((GOLDEN / "matrix.yaml").read_text()))
    data["container"]["apt"].append("vim")
    broken = mx.parse(data, GOLDEN / "matrix.yaml")
    with pytest.raises(workflows.GenerateError, match=r"docker/apt\.lock: locks apt packages .* "
                                                      r"container\.apt is .* vim"):
        workflows.dockerfile(broken)


def test_a_digest_pinned_alternative_base_is_required():
    data = copy.deepcopy(mx.read_yaml((GOLDEN / "matrix.yaml").read_text()))
    data["container"]["alternative_base"] = "nvidia/cuda:13.0.2-devel-ubuntu24.04"
    with pytest.raises(mx.MatrixError, match=r"container\.alternative_base.*sha256"):
        mx.parse(data, GOLDEN / "matrix.yaml")


def test_container_wheels_target_the_image(lock):
    options = container.target(lock)
    assert options[:5] == ["--only-binary=:all:", "--implementation", "cp", "--python-version",
                           "3.11"]
    platforms = options[6::2]
    assert platforms[0] == "manylinux_2_36_x86_64" and "manylinux_2_28_x86_64" in platforms
    assert platforms[-2:] == ["manylinux_2_17_x86_64", "manylinux2014_x86_64"]


def test_container_wheel_sets_resolve_on_their_own():
    sets = container.requirement_sets(mx.load(GOLDEN / "matrix.yaml"), "tests")
    assert any("torch==2.13.0" in pins for pins in sets)
    assert ["hatchling==1.27.0"] in sets
    for pins in sets:           # two numpy pins in one pip download would never resolve
        names = [pin.split("==")[0].split(">=")[0] for pin in pins]
        assert len(names) == len(set(names)), pins
    assert container.no_deps_requirements()[0].startswith("kernel-lens==")


def test_container_wheels_hold_what_the_engine_adds_at_run_time():
    """pytest-xdist on every pytest stage and the CUDA runtime wheel a CUDA build declares (the
    toolkit's pin where it has one): without them an offline container run fails at pip install."""
    matrix = mx.load()
    tests = container.requirement_sets(matrix, "tests")
    assert any(venvs.pin("pytest-xdist", matrix.tools["pytest-xdist"]) in pins for pins in tests)
    assert ["nvidia-cuda-runtime>=13,<14"] in tests           # a system toolkit: the declared range
    runtime = next(p for p in matrix.toolkits["cuda-13.0-pypi"].packages
                   if p.startswith("nvidia-cuda-runtime=="))
    assert [runtime] in container.requirement_sets(matrix, "ci-gpu")


# ---------------------------------------------------------------------------- slow, real root

slow = pytest.mark.skipif(os.environ.get("OPFORGE_SLOW_TESTS") != "1" or os.geteuid() != 0
                          or not shutil.which("debootstrap"),
                          reason="debootstraps Debian (minutes, root, the mirror): set "
                                 "OPFORGE_SLOW_TESTS=1 as root with debootstrap installed")


@slow
def test_a_debootstrapped_root_matches_the_live_lock_or_names_the_drift(tmp_path):
    from ci.provision import debian

    lock = aptlock.load()
    rootfs = tmp_path / "rootfs"
    subprocess.run(["debootstrap", "--variant=minbase", lock.release, str(rootfs), debian.mirror()],
                   check=True, capture_output=True)
    found = aptlock.installed(str(rootfs / "var" / "lib" / "dpkg"))
    try:
        aptlock.check(lock, "base", found)
    except aptlock.LockError as exc:      # the mirror moved on since the lock: named, not silent
        assert "differ from the lock" in str(exc) and "nox -s apt_lock" in str(exc)
    else:
        changed = dict(found, dash="0.0-1")
        with pytest.raises(aptlock.LockError, match=r"  dash: locked .*, found 0\.0-1"):
            aptlock.check(lock, "base", changed)


def test_the_mirror_comes_from_the_environment_first(monkeypatch):
    monkeypatch.setenv(debian.MIRROR_ENV, "http://mirror.invalid/debian")
    monkeypatch.setenv(debian.SECURITY_ENV, "http://mirror.invalid/debian-security")
    assert debian.mirror() == "http://mirror.invalid/debian"
    assert debian.security_mirror() == "http://mirror.invalid/debian-security"


def test_a_machine_that_is_not_debian_is_told_which_variable_to_set(monkeypatch):
    monkeypatch.delenv(debian.MIRROR_ENV, raising=False)
    monkeypatch.setattr(debian, "_is_debian", lambda: False)  # an Ubuntu runner
    with pytest.raises(RuntimeError, match=r"not Debian.*set OPFORGE_DEBIAN_MIRROR"):
        debian.mirror()
