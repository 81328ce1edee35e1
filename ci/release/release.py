"""The release step after the `release` profile's stages (nox -s release): dist, indexes, smoke test.

    build/release/dist/                      every variant's wheels (the wheel stage's repaired
                                             files, byte for byte) and the sdist of every package
    build/release/index/<variant>/simple/    one PEP 503 index per variant (ci/artifacts/index.py): its
                                             wheels, the variant-free ones, and for the default
                                             variant the sdists too
    build/release/release.json, release.md   file, variant, size, sha256; smoke-test results

The smoke test installs each variant as a user would: a fresh venv, `pip install` of the
variant's pinned versions from its index (--extra-index-url; everything else from pip's own
index), declared dependencies only, then the README quick start. A CUDA variant without a GPU
also loads every library and asks the arch guard (skipped with the reason when no GPU). Last, the
default (CPU) opforge-torch wheel, built against one torch, goes into the CUDA variant's venv with
another torch and runs the quick start again. Then the default variant runs on an older glibc
(ci/release/old_glibc.py; `skipped: <why>` where this machine cannot chroot).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from packaging.utils import canonicalize_name

from ci import model as mx
from ci.artifacts import index, sdists, wheels
from ci.model import key_hash, key_text
from ci.provision import venvs
from ci.release import old_glibc

REPO = mx.REPO
OUT = REPO / "build" / "release"
PROFILE = "release"
# Packages with an sdist: folder -> distribution.
SDIST_FOLDERS = ("kernels", "packages/align", "packages/loader", "packages/ort_plugin",
                 "packages/torch_ext", "packages/trt_plugin")
# Pure-Python packages (py3-none-any, one wheel for every variant): no wheel stage builds or repairs
# them, so their wheels are built here from the sdists that are published.
PURE_PROJECTS = ("opforge-spec", "opforge-align")
# what a user of each variant installs (opforge-trt only where the variant has it)
USER_PACKAGES = ("opforge-torch[onnx]", "opforge-ort", "opforge-loader")
CUDA_CHECK = """
import ctypes, torch, opforge_torch, opforge_ort
info = opforge_torch.build_info()
assert info["cuda"], f"expected a CUDA build, got {info}"
ctypes.CDLL(opforge_ort.library_path())
assert opforge_ort.build_info()["cuda"], opforge_ort.build_info()
try:
    import opforge_trt
    ctypes.CDLL(opforge_trt.library_path())
except ImportError:
    pass
if torch.cuda.device_count() == 0:
    print("arch check: skipped: no GPU (libraries loaded; CUDA", info["cuda"], "SASS", info["sass"],
          "PTX", info["ptx"], ")")
else:
    opforge_torch.cuda_arch_check()
    print("arch check: ok on", torch.cuda.get_device_name())
"""


class ReleaseError(RuntimeError):
    """A release step that failed: the message names the step, the input and what was expected."""


def run(command: list[str], log: Path, **kw) -> subprocess.CompletedProcess:
    with open(log, "a") as handle:
        handle.write(f"\n$ {' '.join(map(str, command))}\n")
        handle.flush()
        return subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, text=True, **kw)


# ------------------------------------------------------------------------------- what was built


def release_cells(matrix: mx.Matrix, variants: set[str]) -> list[mx.Cell]:
    cells, _ = mx.expand(matrix, PROFILE)
    return [c for c in cells if not variants or c.variant in variants]


def variant_wheels(matrix: mx.Matrix, out: Path, variants: set[str]) -> dict[str, list[Path]]:
    """variant -> the repaired wheels its passing wheel stage checked (wheels.json in its work)."""
    report = json.loads((out / "report.json").read_text())
    status = {cell["id"]: cell["stages"].get("wheel", {}).get("status") for cell in report["cells"]}
    found: dict[str, list[Path]] = {}
    for cell in release_cells(matrix, variants):
        if status.get(cell.id) != "pass":
            raise ReleaseError(f"{out / 'report.json'}: the wheel stage of {cell.id} is "
                               f"{status.get(cell.id, 'missing')}, expected pass (report.md says why)")
        key = key_hash(key_text(mx.stage_key(matrix, "wheel", cell)))
        listing = out / "work" / "wheel" / key / wheels.LISTING
        try:
            found.setdefault(cell.variant, []).extend(wheels.read_listing(listing.parent))
        except (OSError, ValueError) as exc:
            raise ReleaseError(f"{listing}: expected the wheel stage's list of repaired wheels "
                               f"({exc})") from None
    return found


def torch_venv_of(matrix: mx.Matrix, cell: mx.Cell) -> Path:
    """The matrix's torch venv of a release cell (made by its stages)."""
    return venvs.venv_path(f"torch-{cell.values['torch']}", venvs.requirements(matrix, cell, "torch"))


def build_sdists(matrix: mx.Matrix, dist: Path, log: Path) -> list[Path]:
    """`python -m build --sdist` of every package, in the default variant's torch venv (torch_ext's
    setup.py imports torch, so it is built there without isolation, as its README says)."""
    default = next(c for c in release_cells(matrix, set()) if not c.label)
    venv = torch_venv_of(matrix, default)
    if not venvs.python(venv).exists():
        raise ReleaseError(f"{venv}: the default variant's torch venv is missing; run the "
                           "release profile's stages first")
    pin = venvs.pin("build", matrix.tools["build"])
    venvs.install_on_top(venv, {"build": (pin, pin)}, lambda argv: run(argv, log).returncode)

    def sh(argv: list[str], env: Mapping[str, str]) -> int:
        return run(argv, log, env={**_clean_env(), **env}).returncode

    try:   # opforge-spec (kernels/) first: the others' isolated builds find it in dist
        return [sdists.make_sdist(venvs.python(venv), REPO / folder, dist, sh,
                                  links=sdists.find_links(str(dist)))
                for folder in SDIST_FOLDERS]
    except sdists.SdistError as exc:
        raise ReleaseError(f"{exc} ({log})") from None


def pure_wheels(sdists: list[Path], dist: Path, log: Path) -> list[Path]:
    """The PURE_PROJECTS' wheels, each built by pip from its published sdist."""
    built = []
    for project in PURE_PROJECTS:
        sdist = next(p for p in sdists if index.project_of(p)[0] == project)
        done = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check",
                    "-w", str(dist), str(sdist)], log, env=_clean_env())
        wheels = sorted(p for p in dist.glob("*-py3-none-any.whl") if index.project_of(p)[0] == project)
        if done.returncode != 0 or not wheels:
            raise ReleaseError(f"{sdist.name}: pip wheel of the {project} sdist failed (see {log})")
        built.append(wheels[-1])
    return built


def _clean_env() -> dict[str, str]:
    """Without opforge's build inputs (a stray OPFORGE_* must not change an sdist or a smoke
    test); pip's own settings stay, as a user's would."""
    return {k: v for k, v in os.environ.items() if not k.startswith("OPFORGE_")}


# ------------------------------------------------------------------------------------- layout


def lay_out(out: Path, wheels: dict[str, list[Path]], sdists: list[Path], pure: list[Path],
            default: str) -> dict:
    """dist/ (every file once) and index/<variant>/simple/; returns the files' descriptions."""
    dist = out / "dist"
    files: dict[str, dict] = {}
    for variant, paths in wheels.items():
        for path in paths:
            digest = index.sha256(path)
            entry = files.setdefault(path.name, {"file": path.name, "sha256": digest,
                                                 "bytes": path.stat().st_size, "variants": []})
            if entry["sha256"] != digest:
                raise ReleaseError(f"{path}: two different files named {path.name} (variants "
                                   f"{entry['variants']} and {variant})")
            entry["variants"].append(variant)
            if not (dist / path.name).exists():
                shutil.copy2(path, dist / path.name)
    for path in [*sdists, *pure]:
        files[path.name] = {"file": path.name, "sha256": index.sha256(path),
                            "bytes": path.stat().st_size, "variants": sorted(wheels)}
    indexes = {}
    for variant, paths in wheels.items():
        extra = [*pure, *sdists] if variant == default else pure
        indexes[variant] = index.write_index([*paths, *extra], out / "index" / variant)
    return {"files": sorted(files.values(), key=lambda f: f["file"]), "indexes": indexes}


# ------------------------------------------------------------------------------------ smoke test


def quick_start() -> str:
    """The README's quick start: its first ```python block."""
    text = (REPO / "README.md").read_text()
    found = re.search(r"```python\n(.*?)```", text, re.S)
    if not found:
        raise ReleaseError("README.md: expected the quick start as a ```python block")
    return found.group(1)


def versions(paths: list[Path]) -> dict[str, str]:
    return dict(index.project_of(p) for p in paths if p.name.endswith(".whl"))


def pip_install(python: Path, index_root: Path, requirements: list[str], log: Path) -> None:
    command = [str(python), "-m", "pip", "install", "--disable-pip-version-check",
               "--extra-index-url", (index_root / "simple").as_uri(), *requirements]
    if run(command, log, env=_clean_env()).returncode != 0:
        raise ReleaseError(f"pip install {' '.join(requirements)} from {index_root}/simple "
                           f"failed (see {log})")


def run_code(python: Path, code: str, what: str, log: Path) -> str:
    """Runs `code`; returns its last output line (the whole output goes to the log)."""
    with tempfile.TemporaryDirectory(prefix="opforge-smoke-") as cwd:
        done = subprocess.run([str(python), "-c", code], cwd=cwd, env=_clean_env(),
                              capture_output=True, text=True)
    with open(log, "a") as handle:
        handle.write(f"\n$ {python} -c <{what}>\n{done.stdout}{done.stderr}")
    if done.returncode != 0:
        raise ReleaseError(f"{what} failed (see {log})")
    lines = done.stdout.strip().splitlines()
    return lines[-1] if lines else ""


# torch and the CUDA wheels it pulls (~5.6 GB for a CUDA torch): what --share-torch links instead
TORCH_FILES = re.compile(r"^(torch|torchgen|triton|nvidia|cuda)([-_.].*)?$")


def share_torch(venv: Path, torch_venv: Path) -> str:
    """Only where disk is short (--share-torch): the fresh venv sees torch and its CUDA wheels of
    the matrix's torch venv (symlinks, a .pth); pip resolves every other dependency itself."""
    source = venvs.site_packages(torch_venv)
    shared = venv / "shared-torch"
    shared.mkdir()
    for entry in source.iterdir():
        if TORCH_FILES.match(entry.name):
            (shared / entry.name).symlink_to(entry)
    site = venvs.site_packages(venv)
    (site / "shared-torch.pth").write_text(f"{shared}\n")
    return f"torch shared from {torch_venv.name} (--share-torch)"


def smoke_variant(out: Path, variant: str, wheels: list[Path], pins: list[str], log: Path,
                  torch_venv: Path | None = None) -> dict:
    """Fresh venv; the variant's packages from its index with their declared dependencies; the
    quick start; for CUDA builds the libraries and the arch guard. Returns what ran and the venv."""
    started = time.monotonic()
    venv = out / "smoke" / variant
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venvs.python(venv)
    shared = [share_torch(venv, torch_venv)] if torch_venv else []
    have = versions(wheels)
    wanted = [f"{req}=={have[canonicalize_name(req.split('[')[0])]}"
              for req in USER_PACKAGES]
    if "opforge-trt" in have:
        wanted.append(f"opforge-trt=={have['opforge-trt']}")
    pip_install(python, out / "index" / variant, [*pins, *wanted], log)
    run_code(python, quick_start(), f"{variant}: the README quick start", log)
    steps = [*shared, "install " + " ".join(wanted + pins), "README quick start"]
    if any("+" in v for v in have.values()):
        arch = run_code(python, CUDA_CHECK, f"{variant}: CUDA libraries and arch check", log)
        steps.append(f"CUDA libraries load; {arch}")
        gpu = _dry_run_extra(python, out / "index" / variant, f"opforge-ort[gpu]=={have['opforge-ort']}",
                             "onnxruntime-gpu", log)
        steps.append(f"opforge-ort[gpu] resolves {gpu}")
    return {"variant": variant, "ok": True, "steps": steps, "seconds": round(time.monotonic() - started)}


def _dry_run_extra(python: Path, index_root: Path, requirement: str, expected: str, log: Path) -> str:
    report = index_root.parent.parent / "smoke" / "dry-run.json"
    command = [str(python), "-m", "pip", "install", "--dry-run", "--quiet", "--report", str(report),
               "--extra-index-url", (index_root / "simple").as_uri(), requirement]
    if run(command, log, env=_clean_env()).returncode != 0:
        raise ReleaseError(f"pip install --dry-run {requirement} failed (see {log})")
    names = {item["metadata"]["name"]: item["metadata"]["version"]
             for item in json.loads(report.read_text())["install"]}
    if expected not in names:
        raise ReleaseError(f"{requirement}: expected it to pull {expected}, pip would install "
                           f"{sorted(names)}")
    return f"{expected}=={names[expected]}"


def smoke_cross_torch(out: Path, default: str, cuda_variant: str, wheels: dict[str, list[Path]],
                      log: Path) -> dict:
    """The default variant's opforge-torch (built against its torch) in the CUDA variant's venv,
    whose torch is another release: pip swaps the wheel, the quick start runs again."""
    started = time.monotonic()
    python = venvs.python(out / "smoke" / cuda_variant)
    version = versions(wheels[default])["opforge-torch"]
    # `==0.1.0` also matches the installed 0.1.0+cu130 (PEP 440 ignores the label): remove it first
    if run([str(python), "-m", "pip", "uninstall", "-y", "opforge-torch"], log).returncode != 0:
        raise ReleaseError(f"pip uninstall opforge-torch in the {cuda_variant} venv failed (see {log})")
    pip_install(python, out / "index" / default, [f"opforge-torch=={version}"], log)
    run_code(python, quick_start(), f"{default} opforge-torch in the {cuda_variant} venv", log)
    probe = "import torch, opforge_torch; print(torch.__version__, opforge_torch.build_info()['torch_built_against'])"
    shown = subprocess.run([str(python), "-c", probe], capture_output=True, text=True).stdout.split()
    return {"variant": f"{default} in {cuda_variant}", "ok": True, "seconds": round(time.monotonic() - started),
            "steps": [(f"opforge-torch {version} built against torch {shown[1] if len(shown) > 1 else '?'} "
                      f"runs the quick start on torch {shown[0] if shown else '?'}")]}


def on_old_glibc(matrix: mx.Matrix, cell: mx.Cell, wheels: list[Path], out: Path, log: Path) -> dict:
    """The default variant on the profile's older Debian (ci/release/old_glibc.py); its torch libraries
    come from the cell's torch venv."""
    torch_lib = venvs.site_packages(torch_venv_of(matrix, cell)) / "torch" / "lib"
    try:
        return old_glibc.check(matrix.profiles[PROFILE].old_glibc, cell.variant, wheels, torch_lib,
                               out, log)
    except old_glibc.OldGlibcError as exc:
        raise ReleaseError(f"{cell.variant} on an older glibc: {exc}") from None


# ---------------------------------------------------------------------------------------- report


def write_report(out: Path, laid: dict, smoke: list[dict]) -> None:
    (out / "release.json").write_text(json.dumps({**laid, "smoke": smoke}, indent=2) + "\n")
    lines = ["# opforge release", "", "| file | variants | MB | sha256 |", "| --- | --- | --- | --- |"]
    lines += [f"| {f['file']} | {' '.join(f['variants'])} | {f['bytes'] / 1e6:.2f} | `{f['sha256']}` |"
              for f in laid["files"]]
    lines += ["", "## Smoke test (fresh venv, from the variant's index)", ""]
    lines += [f"- {s['variant']}: skipped: {s['skipped']}" if s.get("skipped") else
              f"- {s['variant']}: {'ok' if s['ok'] else 'FAILED'} in {s['seconds']} s: "
              f"{'; '.join(s['steps'])}" for s in smoke]
    (out / "release.md").write_text("\n".join(lines) + "\n")


def split_posargs(posargs: list[str]) -> tuple[list[str], list[str]]:
    """nox -s release's arguments: (the engine's, this step's): --share-torch is this step's,
    and the variants of `--only variant=...` are built by the one and laid out by the other."""
    engine = [a for a in posargs if a != "--share-torch"]
    only = next((a.split("=", 1)[1] for a in engine if a.startswith("variant=")), "")
    return engine, ["--variants", only, *(["--share-torch"] if "--share-torch" in posargs else [])]


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(prog="python -m ci.release", description=__doc__.splitlines()[0])
    cli.add_argument("--out", type=Path, default=OUT)
    cli.add_argument("--variants", default="", help="comma-separated (default: every variant built)")
    cli.add_argument("--no-smoke", action="store_true", help="lay out dist/ and index/ only")
    cli.add_argument("--share-torch", action="store_true", help="CUDA variants' smoke venvs link "
                     "torch and its CUDA wheels from the matrix's torch venv (saves ~6 GB of disk "
                     "and the download); every other dependency is still resolved by pip")
    args = cli.parse_args(argv)
    matrix = mx.load()
    chosen = {v for v in args.variants.split(",") if v}
    out = args.out.resolve()
    log = out / "logs" / "release.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("")
    try:
        wheels = variant_wheels(matrix, out, chosen)
        default = next((c.variant for c in release_cells(matrix, chosen) if not c.label), None)
        if default is None:
            raise ReleaseError(f"--variants {args.variants}: the default variant must be among "
                               "them (its index holds the sdists)")
        for folder in (out / "dist", out / "index"):
            shutil.rmtree(folder, ignore_errors=True)
        (out / "dist").mkdir(parents=True)
        sdists = build_sdists(matrix, out / "dist", log)
        pure = pure_wheels(sdists, out / "dist", log)
        laid = lay_out(out, wheels, sdists, pure, default)
        smoke = []
        if not args.no_smoke:
            pins = {c.variant: [f"torch=={c.values['torch']}"] for c in release_cells(matrix, chosen)}
            cells = {c.variant: c for c in release_cells(matrix, chosen)}
            for variant in wheels:
                torch_venv = None
                if args.share_torch and variant != default:
                    torch_venv = torch_venv_of(matrix, cells[variant])
                smoke.append(smoke_variant(out, variant, wheels[variant], pins[variant], log,
                                           torch_venv))
            cuda = [v for v in wheels if v != default]
            if cuda:
                smoke.append(smoke_cross_torch(out, default, cuda[0], wheels, log))
            if matrix.profiles[PROFILE].old_glibc:
                spec = next(p for p in pure if index.project_of(p)[0] == "opforge-spec")
                smoke.append(on_old_glibc(matrix, cells[default], [*wheels[default], spec], out, log))
            shutil.rmtree(out / "smoke", ignore_errors=True)   # GBs of torch
        write_report(out, laid, smoke)
    except (ReleaseError, index.IndexFileError) as exc:
        print(f"opforge release: {exc}", file=sys.stderr)
        return 1
    print((out / "release.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
