"""The one writer of a private apt configuration: a sources file in a state folder of opforge's
cache and the apt-get options that use it instead of the system's lists, preferences and
archives. Nothing is installed into the system. Standard library only."""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"


def stanza(uri: str, suites: str, components: str) -> str:
    """One deb822 sources entry, signed by Debian's archive keyring."""
    return (f"Types: deb\nURIs: {uri}\nSuites: {suites}\nComponents: {components}\n"
            f"Signed-By: {KEYRING}\n")


def options(state: Path, name: str, stanzas: Iterable[str], *extra: str) -> list[str]:
    """Write state/<name>.sources and return the apt-get options that read only it."""
    sources = state / f"{name}.sources"
    (state / "lists" / "partial").mkdir(parents=True, exist_ok=True)
    sources.write_text("\n".join(stanzas))
    return ["-o", f"Dir::Etc::SourceList={sources}", "-o", "Dir::Etc::SourceParts=/dev/null",
            "-o", f"Dir::State::Lists={state / 'lists'}", "-o", "APT::Sandbox::User=root",
            *extra, "-q"]
