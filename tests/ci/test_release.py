"""Release variants (profile `variants:`), version labels, the PEP 503 index generator, wheel tags.

The index tests build small real wheels and sdists with pip and read the index back with pip."""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest

from ci import model as mx
from ci.artifacts import index, wheels
from ci.engine.plan import plan

REPO = Path(__file__).resolve().parents[2]
VARIANTS = {
    "cpu": {"default": True, "cpu_builds": True, "torch": ["2.13.0"]},
    "cu130": {"torch": ["2.14.1"], "toolkit": ["cuda-13.0-pypi"]},
    "cu128": {"torch": ["2.10.0"], "skip": "not built here"},
}


def _release(mutated, variants=VARIANTS) -> mx.Matrix:
    mutated["profiles"]["release"] = {
        "toolkit": ["cuda-13.0-pypi"], "torch": ["2.14.1"], "arch_list": ["8.0;9.0"],
        "opset": [21], "ort": ["1.32.0"], "tensorrt": ["10.14"],
        "stages": ["build-torch", "build-ort", "build-loader", "build-trt", "wheel"],
        "variants": variants}
    return mx.parse(mutated)


def test_each_built_variant_gives_cells_with_its_label(mutated):
    cells, _ = mx.expand(_release(mutated), "release")
    assert [(c.variant, c.label, c.values["torch"], c.cpu_builds) for c in cells] == [
        ("cpu", "", "2.13.0", True), ("cu130", "cu130", "2.14.1", False)]
    assert cells[0].id.endswith("variant=cpu"), cells[0].id


def test_label_keys_cuda_builds_only(mutated):
    """The label is part of a CUDA build's key (it is in the wheel); a build without CUDA (the
    loader) is the same in every variant and runs once."""
    matrix = _release(mutated)
    cpu, cu130 = mx.expand(matrix, "release")[0]
    assert ("label", "cu130") in mx.stage_key(matrix, "build-ort", cu130)
    assert not [p for p in mx.stage_key(matrix, "build-ort", cpu) if p[0] == "label"]
    assert mx.stage_key(matrix, "build-loader", cpu) == mx.stage_key(matrix, "build-loader", cu130)
    assert mx.stage_key(matrix, "wheel", cpu) != mx.stage_key(matrix, "wheel", cu130)


def test_cpu_variant_skips_what_needs_cuda(mutated, host):
    matrix = _release(mutated)
    cells, _ = mx.expand(matrix, "release")
    rows = plan(matrix, host, cells, stages=matrix.profiles["release"].stages)
    assert rows[0]["build-trt"].action == "skip"
    assert rows[0]["build-trt"].reason == "variant cpu ships CPU builds only; trt_plugin needs CUDA"
    assert rows[1]["build-trt"].action == "run" and rows[1]["build-loader"].action == "reuse"


@pytest.mark.parametrize("variants, where, problem", [
    ({"cpu": {"default": True}, "cu130": {"default": True}}, "profiles.release.variants",
     "expected exactly one variant with default: true, got 2 (cpu, cu130)"),
    ({"CU130": {"default": True}}, "profiles.release.variants",
     "'CU130': a variant name is its wheels' local version label"),
    ({"cpu": {"default": True, "skip": "no"}}, "profiles.release.variants",
     "the default variant cpu cannot be skipped"),
    ({"cpu": {"default": True, "torch": ["9.9.9"]}}, "profiles.release.variants.cpu.torch",
     "9.9.9: unknown torch value"),
    ({"cpu": {"default": True, "flavour": "x"}}, "profiles.release.variants.cpu.flavour",
     "unknown key"),
])
def test_bad_variants_are_refused_naming_the_key(mutated, variants, where, problem):
    with pytest.raises(mx.MatrixError) as caught:
        _release(mutated, variants)
    assert caught.value.where == where, str(caught.value)
    assert problem in caught.value.problem, str(caught.value)


# ------------------------------------------------------------------------------- version labels


PROVIDER = REPO / "kernels" / "opforge_spec" / "variant.py"   # opforge-spec's opforge_variant


def _provider(package: str):
    """The dynamic-metadata provider the package builds with: opforge-spec's, one for all."""
    assert 'provider = "opforge_variant"' in (REPO / "packages" / package / "pyproject.toml").read_text()
    spec = importlib.util.spec_from_file_location(f"opforge_variant_{package}", PROVIDER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_plugins_share_one_variant_provider():
    for package in ("ort_plugin", "trt_plugin"):
        assert 'provider = "opforge_variant"' in (REPO / "packages" / package / "pyproject.toml").read_text()
    assert not list((REPO / "packages").glob("*/build_support/opforge_variant.py")), "no copies"


RUNTIME = {"13": ["nvidia-cuda-runtime>=13,<14"], "12": ["nvidia-cuda-runtime-cu12>=12,<13"]}


def cuda_home(tmp_path: Path, version: int) -> str:
    (tmp_path / "include").mkdir(parents=True)
    (tmp_path / "include" / "cuda.h").write_text(f"#define CUDA_VERSION {version}\n")
    return str(tmp_path)


GPU_EXTRAS = {"13": {"gpu": ["onnxruntime-gpu[cuda,cudnn]>=1.27"]},
              "12": {"gpu": ["onnxruntime-gpu[cuda,cudnn]>=1.19,<1.27"]}}


@pytest.mark.parametrize("label, cuda, version, extras, dependencies", [
    ("", None, "0.1.0", {}, []),
    ("cu130", 13000, "0.1.0+cu130", GPU_EXTRAS["13"], RUNTIME["13"]),
    ("cu128", 12080, "0.1.0+cu128", GPU_EXTRAS["12"], RUNTIME["12"]),
])
def test_provider_labels_the_version_and_adds_cuda_extras_and_runtime(monkeypatch, tmp_path, label,
                                                                     cuda, version, extras, dependencies):
    monkeypatch.setenv("OPFORGE_LOCAL_VERSION", label)
    monkeypatch.setenv("OPFORGE_CUDA_HOME", cuda_home(tmp_path, cuda) if cuda else "")
    settings = {"version": "0.1.0", "cuda-extras": GPU_EXTRAS, "cuda-dependencies": RUNTIME}
    assert _provider("ort_plugin").dynamic_metadata(settings, {}) == {
        "version": version, "optional-dependencies": extras, "dependencies": dependencies}


def test_provider_refuses_a_cuda_home_without_cuda_h(monkeypatch, tmp_path):
    monkeypatch.setenv("OPFORGE_CUDA_HOME", str(tmp_path))
    with pytest.raises(ValueError, match=r"expected a CUDA toolkit with include/cuda\.h"):
        _provider("ort_plugin").dynamic_metadata({"version": "0.1.0"}, {})


def test_provider_refuses_a_label_pep440_would_not_take(monkeypatch):
    monkeypatch.setenv("OPFORGE_LOCAL_VERSION", "CUDA 13")
    with pytest.raises(ValueError, match="OPFORGE_LOCAL_VERSION: expected a local version label"):
        _provider("trt_plugin").dynamic_metadata({"version": "0.1.0"}, {})


def test_setup_py_and_providers_agree_on_the_base_version():
    setup = (REPO / "packages" / "torch_ext" / "setup.py").read_text()
    base = re.search(r'^VERSION = "([^"]+)"', setup, re.M).group(1)
    for package in ("ort_plugin", "trt_plugin"):
        text = (REPO / "packages" / package / "pyproject.toml").read_text()
        assert f'version = "{base}"' in text, f"packages/{package}/pyproject.toml: expected {base}"


# ---------------------------------------------------------------------------------------- index


def _project(root: Path, name: str, version: str) -> Path:
    folder = root / f"src-{name}-{version}"
    (folder / "pkg_mod").mkdir(parents=True)
    (folder / "pkg_mod" / "__init__.py").write_text("")
    (folder / "pyproject.toml").write_text(
        f'[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        f'[project]\nname = "{name}"\nversion = "{version}"\nrequires-python = ">=3.9"\n')
    return folder


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> list[Path]:
    """Real wheels of one project in two versions (plain and +cu130), by pip without isolation."""
    if importlib.util.find_spec("setuptools") is None:  # found, not imported: pip builds with it
        pytest.skip("setuptools is not installed (pip wheel --no-build-isolation needs it)")
    root = tmp_path_factory.mktemp("index-src")
    out = root / "wheels"
    for version in ("1.0", "1.0+cu130"):
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                        "--disable-pip-version-check", "-q", "-w", str(out),
                        str(_project(root, "Demo_Pkg", version))], check=True)
    return sorted(out.glob("*.whl"))


def test_index_is_pep503_with_hashes(built, tmp_path):
    listing = index.write_index(built, tmp_path / "cpu")
    assert listing == {"demo-pkg": sorted(p.name for p in built)}
    simple = tmp_path / "cpu" / "simple"
    assert '<a href="demo-pkg/">demo-pkg</a>' in (simple / "index.html").read_text()
    page = (simple / "demo-pkg" / "index.html").read_text()
    for wheel in built:
        assert (f'href="{quote(wheel.name)}#sha256={index.sha256(wheel)}" '
                'data-requires-python="&gt;=3.9"') in page, page
        assert (simple / "demo-pkg" / wheel.name).read_bytes() == wheel.read_bytes()


def test_pip_resolves_the_label_from_the_index(built, tmp_path):
    """pip reads the generated index as a user's would and picks the labelled build."""
    index.write_index(built, tmp_path / "cu130")
    got = tmp_path / "got"
    # only this index: an offline container run sets PIP_NO_INDEX and PIP_FIND_LINKS
    own = {k: v for k, v in os.environ.items() if k not in ("PIP_NO_INDEX", "PIP_FIND_LINKS")}
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(got),
                    "--disable-pip-version-check", "--index-url",
                    (tmp_path / "cu130" / "simple").as_uri(), "demo-pkg"], check=True, env=own)
    assert [p.name for p in got.iterdir()] == [w.name for w in built if "+cu130" in w.name]


def test_index_refuses_what_is_not_a_distribution(tmp_path):
    stray = tmp_path / "notes.txt"
    stray.write_text("x")
    with pytest.raises(index.IndexFileError, match=r"notes\.txt: not a wheel or sdist file name"):
        index.write_index([stray], tmp_path / "ix")


# ----------------------------------------------------------------------------- tags and linking


def test_every_wheel_must_be_py3_none():
    assert wheels.tag_problems("opforge_torch-0.1.0+cu130-py3-none-manylinux_2_28_x86_64.whl") == []
    assert wheels.tag_problems("opforge_torch-0.1.0-cp311-cp311-manylinux_2_34_x86_64.whl") == [
        ("opforge_torch-0.1.0-cp311-cp311-manylinux_2_34_x86_64.whl: tag cp311-cp311, expected "
        "py3-none (one wheel for every CPython)")]


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to build the test libraries")
def test_a_library_using_python_is_caught(tmp_path):
    for name, body in (("libclean.so.1", "int f(void) { return 1; }"),
                       ("libpy.so.1", "void Py_IncRef(void *); void f(void *o) { Py_IncRef(o); }")):
        (tmp_path / "x.c").write_text(body)
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(tmp_path / name), str(tmp_path / "x.c")],
                       check=True)
    log = tmp_path / "log"
    clean, py = tmp_path / "libclean.so.1", tmp_path / "libpy.so.1"
    dynamic = lambda p: subprocess.run(["readelf", "-d", str(p)], capture_output=True, text=True).stdout  # noqa: E731
    assert wheels.python_link_problems(clean, dynamic(clean), log) == []
    assert wheels.python_link_problems(py, dynamic(py), log) == [
        ("libpy.so.1: 1 undefined Python C-API symbols (e.g. Py_IncRef): it needs the interpreter, "
        "so py3-none is wrong")]



# ---------------------------------------------------------------------------------- release step


def test_the_smoke_test_runs_the_readme_quick_start():
    from ci.release import release

    code = release.quick_start()
    compile(code, "README.md quick start", "exec")
    assert "opforge_ort.library_path()" in code and "opforge_torch.rms_norm" in code


@pytest.mark.parametrize("name, shared", [
    ("torch", True), ("torch-2.14.1.dist-info", True), ("torchgen", True), ("triton", True),
    ("nvidia_cublas-13.1.1.3.dist-info", True), ("cuda_bindings-13.5.0.dist-info", True),
    ("nvidia", True), ("torchvision", False), ("numpy", False), ("onnxruntime", False),
    ("opforge_torch", False),
])
def test_share_torch_links_torch_and_its_cuda_wheels_only(name, shared):
    from ci.release import release

    assert bool(release.TORCH_FILES.match(name)) is shared


@pytest.mark.parametrize("package", ["ort_plugin", "trt_plugin"])
def test_cuda_plugins_declare_the_runtime_of_every_toolkit_major(package):
    """A CUDA build links libcudart.so.<major> shared, found through its RUNPATH in the runtime
    wheel: without the declaration it loads only where a system CUDA of that major exists."""
    import tomllib

    settings = tomllib.loads((REPO / "packages" / package / "pyproject.toml").read_text())
    declared = settings["tool"]["dynamic-metadata"][0].get("cuda-dependencies", {})
    majors = {spec.cuda.split(".")[0] for spec in mx.load().toolkits.values()}
    assert majors <= set(declared), f"{package}: no cuda-dependencies for CUDA {majors - set(declared)}"
    for major in majors:
        wanted = "nvidia-cuda-runtime" + ("" if int(major) >= 13 else f"-cu{major}")
        assert any(req.startswith(wanted + ">=") for req in declared[major]), declared[major]


def test_a_skipped_release_check_says_why_in_release_md(tmp_path):
    from ci.release import release

    laid = {"files": []}
    release.write_report(tmp_path, laid, [
        {"variant": "cpu", "ok": True, "steps": ["README quick start"], "seconds": 3},
        {"variant": "cpu on Debian bullseye", "ok": True, "skipped": "needs root", "steps": [],
         "seconds": 0}])
    text = (tmp_path / "release.md").read_text()
    assert "- cpu: ok in 3 s: README quick start" in text
    assert "- cpu on Debian bullseye: skipped: needs root" in text
    assert "bullseye: ok" not in text


def test_the_old_glibc_check_is_skipped_without_root(monkeypatch):
    from ci.release import old_glibc

    monkeypatch.setattr(old_glibc.os, "geteuid", lambda: 1000)
    assert old_glibc.unavailable() == "needs root (debootstrap, chroot)"
    result = old_glibc.check(mx.load().profiles["release"].old_glibc, "cpu", [], Path("/nonexistent"),
                             Path("/nonexistent"), Path("/nonexistent/log"))
    assert result["skipped"] == "needs root (debootstrap, chroot)" and result["steps"] == []


def metadata_wheel(folder: Path, name: str, version: str, requires: list[str]) -> str:
    import zipfile

    path = folder / f"{name}-{version}-py3-none-linux_x86_64.whl"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    meta += "".join(f"Requires-Dist: {req}\n" for req in requires)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{name}-{version}.dist-info/METADATA", meta)
    return str(path)


def test_a_stage_venv_gets_what_the_built_wheels_declare(tmp_path):
    """The matrix installs its wheels --no-deps; what they declare beyond the venv's pins (a CUDA
    build's runtime wheel) comes after, as a user's pip would bring it: the toolkit's own pin when
    it fits, never a second copy of a pinned or built package, never an extra."""
    from ci.engine import executors, stage_env
    from ci.report.result import Result

    matrix = mx.load()
    cell = next(c for c in mx.expand(matrix, "release")[0] if c.variant == "cu128")
    ort = metadata_wheel(tmp_path, "opforge_ort", "0.1.0+cu128", [
        "nvidia-cuda-runtime-cu12<13,>=12", 'onnxruntime-gpu>=1.17; extra == "gpu"'])
    loader = metadata_wheel(tmp_path, "opforge_loader", "0.1.0", ["numpy", "opforge-ort"])
    inputs = {"build-ort": Result("pass", outputs={"wheels": [ort]}),
              "build-loader": Result("pass", outputs={"wheels": [loader]})}
    job = executors.Job(matrix, cell, matrix.stages["unit-loader"], "key", "digest", inputs,
                        tmp_path / "log", tmp_path)
    assert stage_env.declared_dependencies(job, tmp_path / "venv") == {
        "nvidia-cuda-runtime-cu12": ("nvidia-cuda-runtime-cu12==12.4.127",) * 2}


def test_a_runtime_the_venv_already_meets_is_kept(tmp_path):
    """torch 2.10.0 (cu128) brings nvidia-cuda-runtime-cu12 12.8.90, which meets the cu128 ORT
    build's `>=12,<13`: the cell's toolkit pin (12.4.127) installed over it broke `import torch`
    in every later stage of that venv (found by release.yml under act). A runtime the venv lacks,
    or one outside the range, still gets the toolkit's pin."""
    from ci.engine import executors, stage_env
    from ci.report.result import Result

    matrix = mx.load()
    cell = next(c for c in mx.expand(matrix, "release")[0] if c.variant == "cu128")
    ort = metadata_wheel(tmp_path, "opforge_ort", "0.1.0+cu128", ["nvidia-cuda-runtime-cu12<13,>=12"])
    stage = matrix.stages["unit-torch"]
    inputs = {**{before: Result("pass", outputs={}) for before in stage.after},
              "build-ort": Result("pass", outputs={"wheels": [ort]})}
    job = executors.Job(matrix, cell, stage, "key", "digest", inputs, tmp_path / "log", tmp_path)
    venv = tmp_path / "venv"

    def installed_runtime(version: str) -> None:
        site = venv / "lib" / "python3.11" / "site-packages"
        shutil.rmtree(site, ignore_errors=True)
        info = site / f"nvidia_cuda_runtime_cu12-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: nvidia-cuda-runtime-cu12\nVersion: {version}\n")

    installed_runtime("12.8.90")
    assert stage_env.declared_dependencies(job, venv) == {}
    installed_runtime("11.8.89")
    assert stage_env.declared_dependencies(job, venv) == {
        "nvidia-cuda-runtime-cu12": ("nvidia-cuda-runtime-cu12==12.4.127",) * 2}


def test_the_pure_wheels_serve_every_index_and_the_sdists_the_default(tmp_path):
    """opforge-spec and opforge-align are py3-none-any: one wheel each, in dist/ and in every
    variant's index (a user of the cu130 index installs opforge-align from it too); the sdists go
    to the default variant's index only. opforge-align's wheel used to be missing: PyPI got its
    sdist alone (found by release.yml's publish under act)."""
    import io
    import tarfile

    from ci.release import release

    (tmp_path / "dist").mkdir()
    built = tmp_path / "built"
    built.mkdir()
    torch_cpu = metadata_wheel(built, "opforge_torch", "0.1.0", [])
    torch_cu = metadata_wheel(built, "opforge_torch", "0.1.0+cu130", [])
    pure = [Path(metadata_wheel(built, name, "0.1.0", [])) for name in ("opforge_spec", "opforge_align")]
    sdist = built / "opforge_align-0.1.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as archive:
        info = tarfile.TarInfo("opforge_align-0.1.0/PKG-INFO")
        meta = b"Metadata-Version: 2.1\nName: opforge-align\nVersion: 0.1.0\n"
        info.size = len(meta)
        archive.addfile(info, io.BytesIO(meta))
    laid = release.lay_out(tmp_path, {"cpu": [Path(torch_cpu)], "cu130": [Path(torch_cu)]}, [sdist],
                           pure, "cpu")
    assert laid["indexes"]["cu130"]["opforge-align"] == [pure[1].name]
    assert laid["indexes"]["cpu"]["opforge-align"] == sorted([pure[1].name, sdist.name])
    assert {f["file"] for f in laid["files"]} == {Path(torch_cpu).name, Path(torch_cu).name,
                                                  sdist.name, *(p.name for p in pure)}
    assert release.PURE_PROJECTS == ("opforge-spec", "opforge-align")
