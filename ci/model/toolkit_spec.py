"""A CUDA toolkit as matrix.yaml declares it (`toolkits:`): the part of the schema that
ci/provision/toolkits.py provisions from. Three sources: system (an installed toolkit), pypi
(NVIDIA's wheels at exact pins), debian (a Debian package from another suite, relocated)."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Mapping

SOURCES = ("system", "pypi", "debian")
KEYS = {"cuda", "source", "packages", "debian", "cuobjdump"}
DEBIAN_KEYS = {"suite", "package", "version"}
PIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*==[0-9][A-Za-z0-9.+!-]*$")
TOOLKIT_ID = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
CUDA_VERSION = re.compile(r"^\d+\.\d+$")


class ToolkitError(RuntimeError):
    """A toolkit that is misdescribed, unavailable or broken; the message names the id and the fix."""


class SpecError(ToolkitError):
    """A `toolkits:` entry that is misdescribed: where (`toolkits.<id>.<key>`) and the problem as
    fields, so ci.model reports it in its own `matrix.yaml: <where>: <problem>` shape."""

    def __init__(self, where: str, problem: str):
        self.where, self.problem = where, problem
        super().__init__(f"opforge: matrix.yaml: {where}: {problem}")


@dataclasses.dataclass(frozen=True)
class ToolkitSpec:
    id: str
    cuda: str
    source: str
    packages: tuple[str, ...] = ()
    debian: Mapping[str, str] | None = None
    cuobjdump: str | None = None

    def data(self) -> dict:
        """The spec as matrix.yaml writes it (canonical: used for the cache key)."""
        out: dict = {"cuda": self.cuda, "source": self.source}
        if self.packages:
            out["packages"] = list(self.packages)
        if self.debian:
            out["debian"] = dict(self.debian)
        if self.cuobjdump:
            out["cuobjdump"] = self.cuobjdump
        return out

    def key(self) -> str:
        return hashlib.sha256(json.dumps(self.data(), sort_keys=True).encode()).hexdigest()[:10]



def _fail(toolkit_id: str, key: str, expected: str, got: object) -> SpecError:
    where = f"toolkits.{toolkit_id}" + (f".{key}" if key else "")
    return SpecError(where, f"expected {expected}, got {got!r}")


def parse_spec(toolkit_id: str, data: object) -> ToolkitSpec:
    """Validate one `toolkits:` entry; raise SpecError naming the key on the first problem."""
    if not isinstance(toolkit_id, str) or not TOOLKIT_ID.match(toolkit_id):
        raise _fail(str(toolkit_id), "", "an id of lower-case letters, digits, '.', '-', '_'",
                    toolkit_id)
    if isinstance(data, ToolkitSpec):
        return data
    if not isinstance(data, Mapping):
        raise _fail(toolkit_id, "", "a mapping with cuda and source", data)
    unknown = sorted(str(key) for key in set(data) - KEYS)
    if unknown:
        raise _fail(toolkit_id, str(unknown[0]), f"one of the keys {sorted(KEYS)}", unknown[0])
    cuda = data.get("cuda")
    if not isinstance(cuda, str) or not CUDA_VERSION.match(cuda):
        raise _fail(toolkit_id, "cuda", 'a quoted "MAJOR.MINOR" string such as "13.0"', cuda)
    source = data.get("source")
    if source not in SOURCES:
        raise _fail(toolkit_id, "source", f"one of {list(SOURCES)}", source)
    packages = _parse_packages(toolkit_id, source, cuda, data.get("packages"))
    deb = _parse_debian(toolkit_id, source, cuda, data.get("debian"))
    cuobjdump = data.get("cuobjdump")
    if cuobjdump is not None and (not isinstance(cuobjdump, str) or not PIN.match(cuobjdump)):
        raise _fail(toolkit_id, "cuobjdump", "a pin such as 'nvidia-cuda-cuobjdump==13.5.37'",
                    cuobjdump)
    return ToolkitSpec(toolkit_id, cuda, source, packages, deb, cuobjdump)


def _parse_packages(toolkit_id: str, source: str, cuda: str, packages: object) -> tuple[str, ...]:
    if source == "system":
        if packages:
            raise _fail(toolkit_id, "packages", "nothing for a system toolkit", packages)
        return ()
    if not isinstance(packages, list) or not packages:
        raise _fail(toolkit_id, "packages", "a non-empty list of exact pins 'name==version'",
                    packages)
    for pin in packages:
        if not isinstance(pin, str) or not PIN.match(pin):
            raise _fail(toolkit_id, "packages", "exact pins 'name==version'", pin)
        if not pin.split("==")[1].startswith(cuda + "."):
            raise _fail(toolkit_id, "packages", f"versions of CUDA {cuda} ({cuda}.*)", pin)
    names = [pin.split("==")[0] for pin in packages]
    needed = ["nvidia-cuda-runtime", "nvidia-cuda-cccl"] + (["nvidia-cuda-nvcc"] if source == "pypi" else [])
    for need in needed:
        if not any(name.startswith(need) for name in names):
            raise _fail(toolkit_id, "packages", f"a pin of {need}* (the toolkit is incomplete without it)",
                        packages)
    return tuple(packages)


def _parse_debian(toolkit_id: str, source: str, cuda: str, deb: object) -> Mapping[str, str] | None:
    if source != "debian":
        if deb is not None:
            raise _fail(toolkit_id, "debian", f"nothing for a {source} toolkit", deb)
        return None
    if not isinstance(deb, Mapping) or set(deb) != DEBIAN_KEYS:
        raise _fail(toolkit_id, "debian", f"a mapping with exactly {sorted(DEBIAN_KEYS)}", deb)
    for key in sorted(DEBIAN_KEYS):
        if not isinstance(deb[key], str) or not deb[key]:
            raise _fail(toolkit_id, f"debian.{key}", "a non-empty string", deb[key])
    if not deb["version"].startswith(cuda + "."):
        raise _fail(toolkit_id, "debian.version", f"a version of CUDA {cuda} ({cuda}.*)",
                    deb["version"])
    return dict(deb)
