"""Generate the CI files from matrix.yaml: the GitHub Actions workflows and the container's Dockerfile.

    python -m ci.workflows --check     fail, naming the file, when a committed file is stale
    python -m ci.workflows --update    rewrite them

.github/workflows/matrix.yml: an image job builds docker/Dockerfile (docker/build.sh) and pushes it
to the repository's packages, tagged by the hash docker/podman.sh names it by (written in here, so
a changed pin makes the workflow stale); one job per cell of the `ci-gpu` profile runs in that
image with the GPU passed in and uploads its results; a gather job runs the gathering stages
(cross, cross-torch) over all of them and writes one report to the job summary.
.github/workflows/release.yml (on a version tag): the `release` session in the image, a smoke
test of the PyPI files in a fresh venv, provenance attested, trusted publishing to PyPI.
Every action is pinned by the full commit SHA of a release (ACTIONS).
docker/Dockerfile: the template docker/opforge.Dockerfile.in with its @placeholders@ filled from
matrix.yaml.
"""
from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Mapping
from pathlib import Path

import yaml

from ci import model as mx
from ci.engine.workspace import Workspace  # where a run leaves each stage's output folder
from ci.generate.dockerfile import CI_PROFILE, GenerateError, dockerfile, image_tag, pin
from ci.generate.smoke import SMOKE  # the release smoke test's script
from ci.model import cell_slug  # the job id; `nox -s matrix -- --cell ID` reruns that job
from ci.provision import toolkits

REPO = mx.REPO
HEADER = ("# Generated from matrix.yaml by `python -m ci.workflows --update`; do not edit.\n"
          "# `python -m ci.workflows --check` (the generated-files job, nox -s tests) fails when\n"
          "# this file is stale.\n")
HOSTED = "ubuntu-latest"   # GitHub's own runners: the jobs that need no GPU
# Every action by the full commit SHA of a release (a tag can be moved; a commit cannot), the
# release in the comment GitHub's pin checkers and people read. Node 24 releases throughout.
ACTIONS = {
    "checkout": ("actions/checkout", "8e8c483db84b4bee98b60c0593521ed34d9990e8", "v6.0.1"),
    "upload": ("actions/upload-artifact", "b7c566a772e6b6bfb58ed0dc250532a479d7789f", "v6.0.0"),
    "download": ("actions/download-artifact", "37930b1c2abaa49bbe596cd826c3c89aef350131", "v7.0.0"),
    "attest": ("actions/attest-build-provenance", "977bb373ede98d70efbf0b7b13af9c3d6651dc60",
               "v4.1.0"),
    "pypi": ("pypa/gh-action-pypi-publish", "ed0c53931b1dc9bd32cbe73a98c7f6766f8a527e", "v1.13.0"),
}
IMAGE_NAME = "opforge"
# Repository variables, each with GitHub's value as its default: the registry the image job pushes
# to and the GPU jobs pull from, and the GPU jobs' container options. A local run sets them (nox -s
# act: a registry on 127.0.0.1, no --gpus on a machine without a GPU); nothing else differs.
REGISTRY = "${{ vars.OPFORGE_REGISTRY || 'ghcr.io' }}"
GPU_OPTIONS = "${{ vars.OPFORGE_GPU_OPTIONS || '--gpus all' }}"
# The other jobs in the image: act (0.2.89) applies its --container-options only to a job without a
# `container:` block (nektos/act PR #6111), so a local run passes them here; GitHub's value is an
# inert label (an empty `options:` is refused by older runners).
CONTAINER_OPTIONS = "${{ vars.OPFORGE_CONTAINER_OPTIONS || '--label opforge-ci' }}"
# The release: `nox -s release` (profile release) leaves DIST (wheels of every variant and the
# sdists) and INDEX/<variant>/simple/ (a PEP 503 index per variant) under RELEASE_OUT.
RELEASE_SESSION = "release"
RELEASE_PROFILE = "release"
RELEASE_OUT = "build/release"
RELEASE_DIST = f"{RELEASE_OUT}/dist"
RELEASE_INDEX = f"{RELEASE_OUT}/index"
PYPI_DIR = f"{RELEASE_OUT}/pypi"   # what PyPI gets: the sdists and the wheels without a local label
MATRIX_OUT = "build/matrix"        # nox -s matrix's report, logs and stage outputs
GATHERED = "build/gathered"        # where the gather job downloads the cells' results
PINNED_USES = re.compile(r"^(\s*-?\s*uses: )(\S+)@([0-9a-f]{40})$", re.MULTILINE)


# ------------------------------------------------------------------------------------- workflow


def uses(action: str) -> str:
    """`owner/repo@<commit>`; _dump adds the release as a comment."""
    repository, commit, _ = ACTIONS[action]
    return f"{repository}@{commit}"


def _checkout() -> dict:
    return {"uses": uses("checkout"), "with": {"persist-credentials": False}}


def _summary(report_dir: str) -> dict:
    return {"name": "Summary", "if": "always()",
            "run": f"if [ -f {report_dir}/report.md ]; then "
                   f"cat {report_dir}/report.md >> \"$GITHUB_STEP_SUMMARY\"; fi\n"}


def image_job(tag: str, needs: str | None = None) -> dict:
    """Build docker/Dockerfile with docker/build.sh and push it to
    <registry>/<repository>/opforge:<tag> (REGISTRY: vars.OPFORGE_REGISTRY, default ghcr.io),
    unless the registry already has that tag; the jobs in the image read its name from `ref`."""
    script = (
        'echo "$REGISTRY_TOKEN" | docker login "$OPFORGE_REGISTRY" -u "$GITHUB_ACTOR" --password-stdin\n'
        'if docker manifest inspect "$IMAGE" > /dev/null 2>&1; then\n'
        '  echo "opforge: $IMAGE is in the registry: not rebuilt"\n'
        "  exit 0\n"
        "fi\n"
        "sudo apt-get update\n"
        "sudo apt-get install -y --no-install-recommends debootstrap debian-archive-keyring podman"
        " runc\n"
        "built=$(sudo --preserve-env=OPFORGE_PODMAN_ROOT,OPFORGE_DEBIAN_MIRROR,"
        "OPFORGE_DEBIAN_SECURITY_MIRROR docker/build.sh)\n"
        'if [ "${built##*:}" != "$OPFORGE_IMAGE_TAG" ]; then\n'
        '  echo "opforge: docker/build.sh built $built, the workflow expects the tag'
        ' $OPFORGE_IMAGE_TAG: run python -m ci.workflows --update" >&2\n'
        "  exit 1\n"
        "fi\n"
        "sudo --preserve-env=OPFORGE_PODMAN_ROOT,REGISTRY_TOKEN,GITHUB_ACTOR bash -c \\\n"
        "  'source docker/podman.sh && opforge_engine push --creds "
        "\"$GITHUB_ACTOR:$REGISTRY_TOKEN\" \"$1\" \"docker://$2\"' push \"$built\" \"$IMAGE\"\n")
    job = {
        "name": "image (docker/Dockerfile, in the repository's packages)",
        "runs-on": HOSTED,
        "permissions": {"contents": "read", "packages": "write"},
        "outputs": {"ref": "${{ steps.ref.outputs.ref }}"},
        # the runner is Ubuntu: debootstrap needs a Debian mirror, a repository variable
        "env": {"OPFORGE_IMAGE_TAG": tag,
                "OPFORGE_REGISTRY": REGISTRY,
                "OPFORGE_DEBIAN_MIRROR": "${{ vars.OPFORGE_DEBIAN_MIRROR }}",
                "OPFORGE_DEBIAN_SECURITY_MIRROR": "${{ vars.OPFORGE_DEBIAN_SECURITY_MIRROR }}"},
        "steps": [
            _checkout(),
            # registry names are lower case; a repository's name need not be
            {"name": "Image name", "id": "ref",
             "run": f'echo "ref=$OPFORGE_REGISTRY/${{GITHUB_REPOSITORY,,}}/{IMAGE_NAME}:$OPFORGE_IMAGE_TAG"'
                    ' >> "$GITHUB_OUTPUT"\n'},
            {"name": "Build and push (unless the registry has this tag)",
             "env": {"IMAGE": "${{ steps.ref.outputs.ref }}",
                     "REGISTRY_TOKEN": "${{ secrets.GITHUB_TOKEN }}",
                     "OPFORGE_PODMAN_ROOT": "${{ runner.temp }}/podman"},
             "run": script},
        ],
    }
    return {"needs": needs, **job} if needs else job


def _in_image(gpu: bool) -> dict:
    """A job's `container:`: the image job's image, the GPU passed in where the job tests on it."""
    container = {"image": "${{ needs.image.outputs.ref }}",
                 "credentials": {"username": "${{ github.actor }}",
                                 "password": "${{ secrets.GITHUB_TOKEN }}"}}
    return {**container, "options": GPU_OPTIONS if gpu else CONTAINER_OPTIONS}


def gathered_paths(matrix: mx.Matrix, profile: str = CI_PROFILE) -> list[str]:
    """What a cell job uploads (under build/matrix/): its report, logs and the output folders of
    the stages the gathering stages read."""
    stages = matrix.profiles[profile].stages or tuple(matrix.stages)
    read = sorted({before for name in stages if matrix.stages[name].gather
                   for before in matrix.stages[name].after})
    work = Workspace(Path(MATRIX_OUT))
    return ([f"{MATRIX_OUT}/report.json", f"{MATRIX_OUT}/report.md", f"{MATRIX_OUT}/logs/"]
            + [f"{work.work_dir(name, 'key').parent}/" for name in read])


def workflow(matrix: mx.Matrix, tag: str, profile: str = CI_PROFILE) -> str:
    """The tests on CPU, the image, every cell of the profile as its own job in it, the gather."""
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
                    _checkout(),
                    {"name": "Check", "run": f"python3 -m venv \"$RUNNER_TEMP/venv\"\n"
                     f"\"$RUNNER_TEMP/venv/bin/pip\" install {pin(matrix, 'pyyaml')} "
                     f"{pin(matrix, 'packaging')} {pin(matrix, 'pydantic')}\n"
                     f"\"$RUNNER_TEMP/venv/bin/python\" -m ci.workflows --check\n"},
                ],
            },
            "suite": {
                "name": "lint and tests (CPU)",
                "needs": "generated-files",
                "runs-on": HOSTED,
                "steps": [_checkout(),
                          {"name": "Lint", "run": "python3 ci/bootstrap.py -s lint\n"},
                          {"name": "Tests", "run": "python3 ci/bootstrap.py -s tests\n"}],
            },
            "image": image_job(tag, needs="generated-files"),
            "cell": {
                "name": "${{ matrix.id }}",
                "needs": "image",
                "runs-on": runs_on,
                "container": _in_image(gpu=True),
                "permissions": {"contents": "read", "packages": "read"},
                "timeout-minutes": 60,
                "strategy": {"fail-fast": False, "matrix": {"include": include}},
                "steps": [
                    _checkout(),
                    # the image's nox (matrix.yaml's pin) and toolkits (provisioned in the build)
                    {"name": "Run the cell",
                     "run": f"nox -s matrix -- --profile {profile} --cell \"$OPFORGE_CELL\"\n",
                     "env": {"OPFORGE_CELL": "${{ matrix.id }}"}},
                    _summary(MATRIX_OUT),
                    {"name": "Upload the results", "if": "always()", "uses": uses("upload"),
                     "with": {"name": "results-${{ matrix.id }}",
                              "path": "\n".join(gathered_paths(matrix, profile)) + "\n",
                              "if-no-files-found": "warn"}},
                ],
            },
            "gather": {
                "name": "gather (cross, cross-torch) and one report",
                "needs": "cell",
                "if": "always()",
                "runs-on": HOSTED,
                "steps": [
                    _checkout(),
                    {"name": "Download every cell's results", "uses": uses("download"),
                     "with": {"pattern": "results-*", "path": GATHERED}},
                    {"name": "Gather",
                     "run": f"python3 ci/bootstrap.py -s matrix -- --profile {profile} "
                            f"--gather-from {GATHERED}\n"},
                    _summary(MATRIX_OUT),
                    {"name": "Upload the report", "if": "always()", "uses": uses("upload"),
                     "with": {"name": "report", "path": f"{MATRIX_OUT}/report.*\n",
                              "if-no-files-found": "warn"}},
                ],
            },
        },
    }
    return HEADER + _dump(document)


def wheels_workflow() -> str:
    """Wheels: `nox -s wheels` (build, auditwheel repair, checks, smoke test)."""
    document = {
        "name": "wheels",
        "on": {"workflow_dispatch": None},
        "permissions": {"contents": "read"},
        "jobs": {"wheels": {
            "runs-on": HOSTED,
            "steps": [_checkout(),
                      {"name": "Build, repair and check", "run": "python3 ci/bootstrap.py -s wheels\n"},
                      {"name": "Upload", "uses": uses("upload"),
                       "with": {"name": "wheels", "path": "build/wheels/work/wheel/*/repaired/",
                                "if-no-files-found": "error"}}],
        }},
    }
    return HEADER + _dump(document)




def release_workflow(matrix: mx.Matrix, tag: str) -> str:
    """On a version tag: build the release profile in the image, smoke-test the PyPI files as a
    user installs them, attest provenance, publish to PyPI (trusted publishing) and leave the
    per-variant indexes as an artifact."""
    profile = matrix.profiles.get(RELEASE_PROFILE)
    runs_on = list(profile.runs_on) if profile and profile.runs_on else HOSTED
    select = (f"mkdir -p {PYPI_DIR}\n"
              f"cp {RELEASE_DIST}/*.tar.gz {PYPI_DIR}/\n"
              "# PyPI refuses local version labels (+cu130): those variants live in their index\n"
              f"find {RELEASE_DIST} -maxdepth 1 -name '*.whl' ! -name '*+*' -exec cp {{}} {PYPI_DIR}/ \\;\n"
              f"ls -l {PYPI_DIR}\n")
    artifact = lambda name, path: {"name": f"Upload {name}", "uses": uses("upload"),  # noqa: E731
                                   "with": {"name": name, "path": path,
                                            "if-no-files-found": "error"}}
    download = lambda name, path: {"name": f"Download {name}",  # noqa: E731
                                   "uses": uses("download"), "with": {"name": name, "path": path}}
    document = {
        "name": "release",
        "on": {"push": {"tags": ["v*"]}},
        "permissions": {"contents": "read"},
        "jobs": {
            "image": image_job(tag),
            "build": {
                "name": f"nox -s {RELEASE_SESSION} in the image",
                "needs": "image",
                "runs-on": runs_on,
                "container": _in_image(gpu=False),
                "permissions": {"contents": "read", "packages": "read"},
                "timeout-minutes": 120,
                "steps": [_checkout(),
                          {"name": "Build, test and index every variant",
                           "run": f"nox -s {RELEASE_SESSION}\n"},
                          _summary(RELEASE_OUT),
                          {"name": "Select what PyPI gets", "run": select},
                          artifact("dist", f"{RELEASE_DIST}/"),
                          artifact("pypi", f"{PYPI_DIR}/"),
                          artifact("indexes", f"{RELEASE_INDEX}/")],
            },
            "smoke": {
                "name": "install the PyPI files in a fresh venv and run both ops",
                "needs": "build",
                "runs-on": HOSTED,
                "steps": [download("pypi", "pypi"), {"name": "Smoke test", "run": SMOKE}],
            },
            "attest": {
                "name": "attest the build provenance",
                "needs": "build",
                "runs-on": HOSTED,
                "permissions": {"contents": "read", "id-token": "write", "attestations": "write"},
                "steps": [download("dist", "dist"),
                          {"uses": uses("attest"), "with": {"subject-path": "dist/*"}}],
            },
            "publish": {
                "name": "publish to PyPI (trusted publishing)",
                "needs": ["smoke", "attest"],
                "runs-on": HOSTED,
                "environment": {"name": "pypi"},
                "permissions": {"id-token": "write"},
                "steps": [download("pypi", "dist"),
                          {"uses": uses("pypi"), "with": {"packages-dir": "dist/"}}],
            },
        },
    }
    return HEADER + _dump(document)


def actionlint_config(matrix: mx.Matrix) -> str:
    """actionlint's list of the self-hosted runner labels the profiles use."""
    labels = sorted({label for profile in matrix.profiles.values() for label in profile.runs_on}
                    - {"self-hosted"})
    return HEADER + _dump({"self-hosted-runner": {"labels": labels}})


def _dump(document: Mapping) -> str:
    class Dumper(yaml.SafeDumper):
        pass

    def string(dumper, value):  # multi-line run scripts as literal blocks, as people write them
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, string)
    text = yaml.dump(document, Dumper=Dumper, sort_keys=False, width=100, default_flow_style=False)
    # PyYAML quotes the key `on` (YAML 1.1 read it as a boolean); GitHub reads it either way.
    text = text.replace("'on':", "on:", 1)
    text = PINNED_USES.sub(_with_release, text)
    return text.replace(": null\n", ":\n")


def _with_release(found: re.Match) -> str:
    release = {(repository, commit): tag for repository, commit, tag in ACTIONS.values()}
    return f"{found.group(0)} # {release[(found.group(2), found.group(3))]}"


# ----------------------------------------------------------------------------------------- files


def generated(matrix: mx.Matrix, tag: str | None = None) -> dict[str, str]:
    """Repository path -> the content matrix.yaml generates for it. tag: the image's (default:
    the hash of the generated Dockerfile and the scripts docker/build.sh copies in)."""
    docker = dockerfile(matrix)
    tag = tag or image_tag(docker)
    return {".github/workflows/matrix.yml": workflow(matrix, tag),
            ".github/workflows/release.yml": release_workflow(matrix, tag),
            ".github/workflows/wheels.yml": wheels_workflow(),
            ".github/actionlint.yaml": actionlint_config(matrix),
            "docker/Dockerfile": docker}


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
