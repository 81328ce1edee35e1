"""docker/Dockerfile: the template docker/opforge.Dockerfile.in with its @placeholders@ filled from
matrix.yaml (the Debian release and the locked packages of docker/apt.lock, the pins nox runs
with, one layer per toolkit of the CI profile, the ORT headers), and the tag docker/podman.sh
gives the image built from it."""
from __future__ import annotations

import hashlib
import json
import re
import textwrap
from collections.abc import Callable, Mapping
from pathlib import Path

from ci import model as mx
from ci.bootstrap import NEEDED as BOOTSTRAP_TOOLS  # nox and PyYAML: what runs nox
from ci.generate import aptlock
from ci.provision import toolkits

REPO = mx.REPO
CI_PROFILE = "ci-gpu"
# The image: docker/build.sh builds docker/Dockerfile with these scripts copied in, and
# docker/podman.sh tags it with the first 12 hex of the sha256 of it and these files.
IMAGE_INPUTS = (  # as docker/podman.sh hashes them (OPFORGE_IMAGE_SCRIPTS), in its order
    "docker/apt.lock",
    "ci/__init__.py",
    "ci/aptlock.py",
    "ci/debian.py",
    "ci/toolkits.py",
    "ci/generate/__init__.py",
    "ci/generate/aptlock.py",
    "ci/provision/__init__.py",
    "ci/provision/apt.py",
    "ci/provision/debian.py",
    "ci/provision/toolkits.py",
    "ci/provision/toolkit_install.py",
    "ci/provision/toolkit_verify.py",
    "ci/model/__init__.py",
    "ci/model/checks.py",
    "ci/model/errors.py",
    "ci/model/expand.py",
    "ci/model/keys.py",
    "ci/model/load.py",
    "ci/model/matrix.py",
    "ci/model/schema.py",
    "ci/model/toolkit_spec.py",
    "ci/model/validate.py",
    "ci/model/values.py",
    "ci/model/yaml_input.py",
)
PLACEHOLDER = re.compile(r"@([A-Za-z_][\w.:-]*)@")
TEMPLATE = REPO / "docker" / "opforge.Dockerfile.in"


class GenerateError(RuntimeError):
    """matrix.yaml lacks what a generated file needs; the message names the key."""


def pin(matrix: mx.Matrix, name: str) -> str:
    if name not in matrix.tools:
        raise GenerateError(f"matrix.yaml: tools.{name}: missing (the generated CI files pin it)")
    return f"{name}=={matrix.tools[name]}"


def image_tag(dockerfile_text: str, root: Path = REPO) -> str:
    """The tag docker/podman.sh gives the image built from this Dockerfile (opforge_image)."""
    digest = hashlib.sha256(dockerfile_text.encode())
    for rel in IMAGE_INPUTS:
        digest.update((root / rel).read_bytes())
    return digest.hexdigest()[:12]


def dockerfile(matrix: mx.Matrix, template: Path = TEMPLATE) -> str:
    """docker/opforge.Dockerfile.in with its @placeholders@ filled from matrix.yaml."""
    container = matrix.data.get("container")
    if not isinstance(container, Mapping) or not isinstance(container.get("debian"), str):
        raise GenerateError("matrix.yaml: container.debian: expected the base image's Debian "
                            f"release (e.g. bookworm), got {container!r}")
    ort = matrix.data["sources"]["ort_headers"]
    lock = _apt_lock(matrix, container)
    values: dict[str, Callable[[], str]] = {
        "GENERATED": lambda: "Generated from docker/opforge.Dockerfile.in and matrix.yaml by "
                             "`python -m ci.workflows --update`; do not edit.",
        "DEBIAN": lambda: container["debian"],
        "APT_INDEXES": lambda: "\n".join(f"#   {suite} {version}, {date}"
                                         for suite, version, date in lock.indexes),
        "APT_PINS": lambda: _continued(lock.pins("image"), indent=6),
        "PIP": lambda: " ".join(pin(matrix, name) for name in BOOTSTRAP_TOOLS),
        "TOOLKITS": lambda: _toolkit_layers(matrix),
        "ORT_SUITE": lambda: ort["debian_suite"],
        "ORT_PACKAGE": lambda: ort["package"],
        "ORT_VERSION": lambda: ort["version"],
    }

    def fill(found: re.Match) -> str:
        name = found.group(1)
        if name not in values:
            raise GenerateError(f"{template.name}: @{name}@: unknown placeholder (known: "
                                f"{', '.join(values)})")
        return values[name]()

    return PLACEHOLDER.sub(fill, template.read_text())


def _apt_lock(matrix: mx.Matrix, container: Mapping) -> aptlock.Lock:
    """docker/apt.lock beside the matrix file, refused when it locks another release or apt list."""
    path = matrix.path.parent / "docker" / "apt.lock"
    try:
        lock = aptlock.load(path)
    except aptlock.LockError as exc:
        raise GenerateError(str(exc)) from None
    problem = aptlock.stale(lock, container, "docker/apt.lock")
    if problem:
        raise GenerateError(problem)
    return lock


def _continued(words: list[str], indent: int, width: int = 100) -> str:
    """Shell words wrapped into lines continued with a backslash."""
    lines = textwrap.wrap(" ".join(words), width=width - indent - 2, break_long_words=False,
                          break_on_hyphens=False)
    return " \\\n".join(" " * indent + line for line in lines)


def _toolkit_layers(matrix: mx.Matrix) -> str:
    """One RUN per toolkit of the CI profile, its spec written out (the layer caches on the pins)."""
    ids = matrix.profiles[CI_PROFILE].values["toolkit"]
    layers = []
    for toolkit_id in ids:
        spec = toolkits.parse_spec(toolkit_id, matrix.props("toolkit", toolkit_id))
        if spec.source == "system":
            continue  # an installed toolkit is the host's, mounted with docker/run.sh --cuda
        layers.append("RUN --mount=type=secret,id=hostca \\\n"
                      "    if [ -f /run/secrets/hostca ]; then export PIP_CERT=/run/secrets/hostca; fi \\\n"
                      f" && python -m ci.toolkits provision {toolkit_id} \\\n"
                      f"    --spec '{json.dumps(spec.data(), sort_keys=True)}'")
    return "\n".join(layers)
