"""Generate the CI files from matrix.yaml: the GitHub Actions workflow and the container's Dockerfile.

    python -m ci.workflows --check     fail, naming the file, when a committed file is stale
    python -m ci.workflows --update    rewrite them

.github/workflows/matrix.yml: one job per cell of the `ci-gpu` profile, on the profile's runner
labels, each running the same nox session filtered to its cell. docker/Dockerfile: the template
docker/opforge.Dockerfile.in with its @placeholders@ filled from matrix.yaml.
"""
from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
import textwrap
from collections.abc import Callable, Mapping
from pathlib import Path

try:
    from ci import aptlock, toolkits
    from ci import matrix as mx
    from ci.bootstrap import NEEDED as BOOTSTRAP_TOOLS
    from ci.plan import cell_slug
except ImportError:  # run as a script: python ci/workflows.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from ci import aptlock, toolkits
    from ci import matrix as mx
    from ci.bootstrap import NEEDED as BOOTSTRAP_TOOLS  # nox and PyYAML: what runs nox
    from ci.plan import cell_slug  # the job id; `nox -s matrix -- --cell ID` reruns that job

REPO = mx.REPO
CI_PROFILE = "ci-gpu"
HEADER = ("# Generated from matrix.yaml by `python -m ci.workflows --update`; do not edit.\n"
          "# `python -m ci.workflows --check` (the generated-files job, nox -s tests) fails when\n"
          "# this file is stale.\n")
# The actions' major releases (node24 runtimes; actionlint flags the node20 ones as deprecated).
HOSTED = "ubuntu-latest"   # GitHub's own runners: the CPU-only jobs (tests, lint, wheels)
CHECKOUT, CACHE, UPLOAD = "actions/checkout@v6", "actions/cache@v5", "actions/upload-artifact@v6"
PLACEHOLDER = re.compile(r"@([A-Za-z_][\w.:-]*)@")


class GenerateError(RuntimeError):
    """matrix.yaml lacks what a generated file needs; the message names the key."""


# ------------------------------------------------------------------------------------- workflow


def _pin(matrix: mx.Matrix, name: str) -> str:
    if name not in matrix.tools:
        raise GenerateError(f"matrix.yaml: tools.{name}: missing (the generated CI files pin it)")
    return f"{name}=={matrix.tools[name]}"


def workflow(matrix: mx.Matrix, profile: str = CI_PROFILE) -> str:
    """The GitHub Actions workflow running every cell of the profile as its own job."""
    cells, _ = mx.expand(matrix, profile)
    runs_on = list(matrix.profiles[profile].runs_on)
    if not runs_on:
        raise GenerateError(f"matrix.yaml: profiles.{profile}.runs_on: expected runner labels, "
                            f"got none")
    include = [{"id": cell_slug(cell), **{axis: cell.values[axis] for axis in mx.AXES}}
               for cell in cells]
    document = {
        "name": "matrix",
        "on": {"push": {"branches": ["main"]}, "pull_request": None, "workflow_dispatch": None},
        "permissions": {"contents": "read"},
        "concurrency": {"group": "${{ github.workflow }}-${{ github.ref }}",
                        "cancel-in-progress": True},
        "jobs": {
            "generated-files": {
                "name": "CI files match matrix.yaml",
                "runs-on": HOSTED,
                "steps": [
                    {"uses": CHECKOUT},
                    {"name": "Check", "run": f"python3 -m venv \"$RUNNER_TEMP/venv\"\n"
                     f"\"$RUNNER_TEMP/venv/bin/pip\" install {_pin(matrix, 'pyyaml')} "
                     f"{_pin(matrix, 'packaging')}\n"
                     f"\"$RUNNER_TEMP/venv/bin/python\" -m ci.workflows --check\n"},
                ],
            },
            "suite": {
                "name": "lint and tests (CPU)",
                "needs": "generated-files",
                "runs-on": HOSTED,
                "steps": [{"uses": CHECKOUT},
                          {"name": "Lint", "run": "python3 ci/bootstrap.py -s lint\n"},
                          {"name": "Tests", "run": "python3 ci/bootstrap.py -s tests\n"}],
            },
            "cell": {
                "name": "${{ matrix.id }}",
                "needs": "generated-files",
                "runs-on": runs_on,
                "timeout-minutes": 60,
                "strategy": {"fail-fast": False, "matrix": {"include": include}},
                "steps": [
                    {"uses": CHECKOUT},
                    {"name": "Cache the CUDA toolkit", "uses": CACHE,
                     "with": {"path": "~/.cache/opforge/toolkits\n~/.cache/opforge/debian\n",
                              "key": "opforge-toolkits-${{ matrix.toolkit }}-"
                                     "${{ hashFiles('matrix.yaml', 'ci/toolkits.py') }}"}},
                    # bootstrap.py runs the nox that matrix.yaml pins (README's first command).
                    {"name": "Run the cell",
                     "run": f"python3 ci/bootstrap.py -s matrix -- --profile {profile} "
                            "--cell \"$OPFORGE_CELL\"\n",
                     "env": {"OPFORGE_CELL": "${{ matrix.id }}"}},
                    {"name": "Summary", "if": "always()",
                     "run": "if [ -f build/matrix/report.md ]; then "
                            "cat build/matrix/report.md >> \"$GITHUB_STEP_SUMMARY\"; fi\n"},
                    {"name": "Upload the report", "if": "always()",
                     "uses": UPLOAD,
                     "with": {"name": "report-${{ matrix.id }}", "path": "build/matrix/",
                              "if-no-files-found": "warn"}},
                ],
            },
        },
    }
    return HEADER + _dump(document)


def wheels_workflow() -> str:
    """Release wheels: `nox -s wheels` (build, auditwheel repair, checks, smoke test)."""
    document = {
        "name": "wheels",
        "on": {"push": {"tags": ["v*"]}, "workflow_dispatch": None},
        "permissions": {"contents": "read"},
        "jobs": {"wheels": {
            "runs-on": HOSTED,
            "steps": [{"uses": CHECKOUT},
                      {"name": "Build, repair and check", "run": "python3 ci/bootstrap.py -s wheels\n"},
                      {"name": "Upload", "uses": UPLOAD,
                       "with": {"name": "wheels", "path": "build/wheels/work/wheel/*/repaired/",
                                "if-no-files-found": "error"}}],
        }},
    }
    return HEADER + _dump(document)


def actionlint_config(matrix: mx.Matrix) -> str:
    """actionlint's list of the self-hosted runner labels the profiles use."""
    labels = sorted({label for profile in matrix.profiles.values() for label in profile.runs_on}
                    - {"self-hosted"})
    return HEADER + _dump({"self-hosted-runner": {"labels": labels}})


def _dump(document: Mapping) -> str:
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def string(dumper, value):  # multi-line run scripts as literal blocks, as people write them
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, string)
    text = yaml.dump(document, Dumper=Dumper, sort_keys=False, width=100, default_flow_style=False)
    # PyYAML quotes the key `on` (YAML 1.1 read it as a boolean); GitHub reads it either way.
    text = text.replace("'on':", "on:", 1)
    return text.replace(": null\n", ":\n")


# ------------------------------------------------------------------------------------ Dockerfile


TEMPLATE = REPO / "docker" / "opforge.Dockerfile.in"


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
        "PIP": lambda: " ".join(_pin(matrix, name) for name in BOOTSTRAP_TOOLS),
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


# ----------------------------------------------------------------------------------------- files


def generated(matrix: mx.Matrix) -> dict[str, str]:
    """Repository path -> the content matrix.yaml generates for it."""
    return {".github/workflows/matrix.yml": workflow(matrix),
            ".github/workflows/wheels.yml": wheels_workflow(),
            ".github/actionlint.yaml": actionlint_config(matrix),
            "docker/Dockerfile": dockerfile(matrix)}


def stale(repo: Path, files: Mapping[str, str]) -> list[str]:
    """One line per committed file that differs from its generated content, then a short diff."""
    problems = []
    for path, want in files.items():
        target = repo / path
        have = target.read_text() if target.exists() else None
        if have == want:
            continue
        if have is None:
            problems.append(f"opforge: {path}: missing; run python -m ci.workflows --update")
            continue
        diff = list(difflib.unified_diff(have.splitlines(), want.splitlines(), f"{path} (committed)",
                                         f"{path} (from matrix.yaml)", lineterm="", n=1))
        first = next(line for line in diff[2:] if line[:1] in "+-")
        problems.append(f"opforge: {path}: stale, differs from what matrix.yaml generates "
                        f"(first change: {first.strip()!r}); run python -m ci.workflows --update\n"
                        + "\n".join(diff[:30]))
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ci.workflows",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--matrix", type=Path, default=mx.MATRIX)
    parser.add_argument("--root", type=Path, default=REPO,
                        help="the tree holding the generated files (default: this repository)")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="fail when a committed file is stale")
    mode.add_argument("--update", action="store_true", help="rewrite the generated files")
    args = parser.parse_args(argv)
    try:
        files = generated(mx.load(args.matrix))
    except (mx.MatrixError, GenerateError, toolkits.ToolkitError) as exc:
        print(exc, file=sys.stderr)
        return 2  # a bad matrix.yaml is a usage error; 1 means stale files
    if args.update:
        for path, text in files.items():
            (args.root / path).parent.mkdir(parents=True, exist_ok=True)
            (args.root / path).write_text(text)
            print(f"opforge: wrote {path}", file=sys.stderr)
        return 0
    problems = stale(args.root, files)
    for problem in problems:
        print(problem, file=sys.stderr)
    if not problems:
        print(f"opforge: {', '.join(files)}: up to date with matrix.yaml", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
