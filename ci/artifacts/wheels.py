"""Repair wheels with auditwheel (third-party runtimes excluded), check their libraries, smoke-test.

Checks per repaired wheel: the platform tag is manylinux_2_28 or older (as the torch and
onnxruntime wheels the libraries run with; a newer one names the symbols that pinned it), the rest
py3-none; every shared library has SONAME lib<name>.so.<major> equal to its file name, exports no
C++ symbol and its entry points, links no libpython and leaves no Python C-API symbol undefined;
no third-party runtime was grafted in; a fresh venv imports the package and finds the
library at library_path().
"""
from __future__ import annotations

import fnmatch
import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from packaging.utils import canonicalize_name, parse_wheel_filename

from ci.artifacts import index

# Runtimes the user brings; never bundled (PITFALLS: "wheel vendors libtorch / libcudart").
EXCLUDES = ("libtorch*.so*", "libc10*.so*", "libcudart.so.*", "libonnxruntime.so.*",
            "libnvinfer*.so*", "libshm.so*", "libgomp*.so*")
# Entry points a library must export (ARCHITECTURE.md); anything mangled (_Z...) is a leak.
ENTRY_POINTS = {"libopforge_ort.so": {"RegisterCustomOps"}, "libopforge_trt.so": {"getCreators"}}
# The newest glibc a wheel may need: manylinux_2_28 (RHEL 8, Debian 10, Ubuntu 20.04), the floor of
# the torch and onnxruntime wheels our libraries run with.
MAX_MANYLINUX = (2, 28)
LEGACY_MANYLINUX = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
# import name and a smoke test per distribution
SMOKE = {
    "opforge_torch": "import os, torch, opforge_spec, opforge_torch; "
                     "assert os.path.isfile(opforge_torch.library_path()); "
                     "assert all(hasattr(torch.ops.opforge, op.torch_name) for op in opforge_spec.OPS.values())",
    "opforge_ort": "import os, opforge_ort; assert os.path.isfile(opforge_ort.library_path())",
    "opforge_loader": "import os, opforge_loader; assert os.path.isfile(opforge_loader.library_path())",
    "opforge_trt": "import os, opforge_trt; assert os.path.isfile(opforge_trt.library_path())",
}


LISTING = "wheels.json"   # in the wheel stage's work folder: the repaired wheels of its cell


def write_listing(work: Path, repaired: list[str]) -> None:
    """What the release step publishes (ci/release/release.py): these files, byte for byte."""
    work.mkdir(parents=True, exist_ok=True)
    (work / LISTING).write_text(json.dumps(repaired, indent=1) + "\n")


def read_listing(work: Path) -> list[Path]:
    return [Path(p) for p in json.loads((work / LISTING).read_text())]


def _run(command: list[str], log: Path, **kw) -> subprocess.CompletedProcess:
    done = subprocess.run(command, capture_output=True, text=True, **kw)
    with open(log, "a") as handle:
        handle.write(f"\n$ {' '.join(command)}\n{done.stdout}{done.stderr}")
    return done


def import_name(wheel: Path) -> str:
    return wheel.name.split("-")[0].replace("-", "_").lower()


def repair(wheel: Path, out: Path, tools: Path, log: Path) -> tuple[Path | None, str]:
    command = [str(tools / "bin" / "auditwheel"), "repair", "-w", str(out)]
    for pattern in EXCLUDES:
        command += ["--exclude", pattern]
    env = {"PATH": f"{tools / 'bin'}:/usr/bin:/bin"}
    done = _run([*command, str(wheel)], log, env=env)
    if done.returncode != 0:
        return None, (done.stderr.strip().splitlines() or ["auditwheel failed"])[-1]
    repaired = sorted(out.glob(f"{wheel.name.split('-')[0]}-*.whl"))
    return (repaired[-1], "") if repaired else (None, "auditwheel wrote no wheel")


def check_library(path: Path, log: Path, dynamic: str | None = None) -> list[str]:
    """Problems with one shared library: SONAME, exported symbols. dynamic: its `readelf -d`."""
    problems = []
    dynamic = _run(["readelf", "-d", str(path)], log).stdout if dynamic is None else dynamic
    soname = re.search(r"Library soname: \[([^\]]+)\]", dynamic)
    if not soname:
        problems.append(f"{path.name}: no SONAME")
    elif soname.group(1) != path.name or not re.fullmatch(r"lib[\w.+-]+\.so\.\d+", path.name):
        problems.append(f"{path.name}: SONAME {soname.group(1)}, expected lib<name>.so.<major> = "
                        "the file name")
    symbols = _run(["nm", "-D", "--defined-only", str(path)], log).stdout.split("\n")
    exported = {line.split()[-1].split("@")[0] for line in symbols
                if len(line.split()) >= 3 and line.split()[1] in "TtDdBbVWRr"}
    leaked = sorted(s for s in exported if s.startswith("_Z"))
    if leaked:
        problems.append(f"{path.name}: exports {len(leaked)} C++ symbols (e.g. {leaked[0]}); "
                        "build with -fvisibility=hidden and a version script")
    problems += python_link_problems(path, dynamic, log)
    stem = path.name.split(".so")[0] + ".so"
    missing = sorted(ENTRY_POINTS.get(stem, set()) - exported)
    if missing:
        problems.append(f"{path.name}: entry point {', '.join(missing)} not exported")
    return problems


def python_link_problems(path: Path, dynamic: str, log: Path) -> list[str]:
    """Our libraries never link Python (what makes their py3-none wheels valid for every CPython):
    no libpython NEEDED, no Py*/_Py* symbol left undefined."""
    problems = [f"{path.name}: NEEDED {name}: a py3-none wheel's library must not link Python"
                for name in re.findall(r"\(NEEDED\)\s+Shared library: \[(libpython[^\]]*)\]", dynamic)]
    undefined = _run(["nm", "-D", "--undefined-only", str(path)], log).stdout.split()
    python_symbols = sorted({s.split("@")[0] for s in undefined if re.match(r"_?Py[A-Z_]", s)})
    if python_symbols:
        problems.append(f"{path.name}: {len(python_symbols)} undefined Python C-API symbols (e.g. "
                        f"{python_symbols[0]}): it needs the interpreter, so py3-none is wrong")
    return problems


def tag_problems(wheel_name: str) -> list[str]:
    """Every opforge wheel is py3-none-<platform>: none of the libraries uses Python's C API."""
    tags = parse_wheel_filename(wheel_name)[3]
    wrong = sorted(f"{t.interpreter}-{t.abi}" for t in tags if (t.interpreter, t.abi) != ("py3", "none"))
    return [f"{wheel_name}: tag {wrong[0]}, expected py3-none (one wheel for every CPython)"] if wrong else []


def manylinux_glibc(wheel_name: str) -> tuple[int, int] | None:
    """The glibc a wheel's platform tag claims to need (the oldest of its compressed tags), None
    when no tag is manylinux: "x-py3-none-manylinux_2_24_x86_64.whl" -> (2, 24)."""
    found = []
    for platform in wheel_name.removesuffix(".whl").rsplit("-", 1)[-1].split("."):
        numbered = re.fullmatch(r"manylinux_(\d+)_(\d+)_\w+", platform)
        legacy = LEGACY_MANYLINUX.get(platform.split("_", 1)[0])
        if numbered:
            found.append((int(numbered[1]), int(numbered[2])))
        elif legacy:
            found.append(legacy)
    return min(found) if found else None


def policy_versions(tools: Path, glibc: tuple[int, int], arch: str) -> dict[str, set[str]] | None:
    """auditwheel's own symbol-version policy for manylinux_<glibc> on arch: {"GLIBC": {"2.2.5",
    ...}, "GLIBCXX": ..., ...}; None if the tools venv holds no readable policy."""
    name = f"manylinux_{glibc[0]}_{glibc[1]}"
    for path in tools.glob("lib/python3*/site-packages/auditwheel/policy/manylinux-policy.json"):
        try:
            policies = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        for policy in policies:
            if policy.get("name") == name:
                versions = policy.get("symbol_versions", {}).get(arch, {})
                return {prefix: set(allowed) for prefix, allowed in versions.items()}
    return None


def too_new_symbols(lib: Path, allowed: dict[str, set[str]], log: Path) -> list[str]:
    """`symbol@VERSION` references of lib whose version the policy does not allow."""
    table = _run(["readelf", "--dyn-syms", "--wide", str(lib)], log).stdout
    found = set()
    for line in table.splitlines():
        fields = line.split()
        if len(fields) < 8 or fields[6] != "UND" or "@" not in fields[7]:
            continue
        symbol, version = fields[7].split("@", 1)
        prefix, _, number = version.lstrip("@").partition("_")
        if prefix in allowed and number not in allowed[prefix]:
            found.add(f"{symbol}@{version.lstrip('@')}")
    return sorted(found)


def platform_problem(repaired: Path, unpacked: Path, tools: Path, log: Path) -> str | None:
    """None when the repaired tag is manylinux_2_28 or older; else what it is and why: the
    symbols that pinned it (per library) and auditwheel show's verdict."""
    glibc = manylinux_glibc(repaired.name)
    if glibc is None:
        return f"{repaired.name}: tag is not manylinux"
    if glibc <= MAX_MANYLINUX:
        return None
    tag = repaired.name.removesuffix(".whl").rsplit("-", 1)[-1]
    arch = tag.split(".")[0].split("_", 3)[-1] if tag.startswith("manylinux_") else "x86_64"
    allowed = policy_versions(tools, MAX_MANYLINUX, arch)
    pinned = []
    for lib in sorted(unpacked.rglob("*.so*")):
        if lib.is_file() and allowed is not None and re.search(r"\.so(\.\d+)*$", lib.name):
            symbols = too_new_symbols(lib, allowed, log)
            if symbols:
                pinned.append(f"{lib.name}: {', '.join(symbols[:8])}" + (" ..." if len(symbols) > 8 else ""))
    auditwheel = tools / "bin" / "auditwheel"
    show = _run([str(auditwheel), "show", str(repaired)], log,
                env={"PATH": f"{tools / 'bin'}:/usr/bin:/bin"}).stdout if auditwheel.is_file() else ""
    verdict = " ".join(re.findall(r"This constrains the platform tag to \S+", " ".join(show.split())))
    limit = f"manylinux_{MAX_MANYLINUX[0]}_{MAX_MANYLINUX[1]}"
    return (f"{repaired.name}: tag {tag} needs glibc {glibc[0]}.{glibc[1]}, expected {limit} or older; "
            f"symbols newer than {limit}: {'; '.join(pinned) or 'none found (see the log)'}"
            + (f"; auditwheel show: {verdict}" if verdict else ""))


def declared_runtimes(wheel: Path) -> set[str]:
    """The distributions a wheel requires without extras (canonical names)."""
    return {canonicalize_name(req.name) for req in index.runtime_requirements(wheel)}


def undeclared_cudart(library: str, dynamic: str, declared: set[str]) -> list[str]:
    """A library that NEEDs libcudart.so.N (`dynamic`: its `readelf -d`) loads only where some CUDA
    runtime is found: its wheel must declare one (`declared`: the nvidia-cuda-runtime wheel of that
    major, or torch, which brings its own), else it works on the build machine (a system CUDA) and
    nowhere else."""
    problems = []
    for major in re.findall(r"\(NEEDED\)\s+Shared library: \[libcudart\.so\.(\d+)\]", dynamic):
        wanted = "nvidia-cuda-runtime" + ("" if int(major) >= 13 else f"-cu{major}")
        if not declared & {wanted, "torch"}:
            problems.append(f"{library} needs libcudart.so.{major} but the wheel does not declare "
                            f"{wanted} (Requires-Dist): it loads only where a system CUDA {major} "
                            f"is installed; add it to the package's cuda-dependencies in "
                            f"pyproject.toml")
    return problems


def bundled_runtimes(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        names = [Path(n).name for n in archive.namelist()]
    return sorted(n for n in names for p in EXCLUDES if fnmatch.fnmatch(n, p))


def smoke(wheel: Path, venv: Path, log: Path, *, torch_site: Path | None = None,
          find_links: str | None = None) -> str | None:
    """Install into a fresh venv and import; torch (if needed) is seen from torch_site, the
    opforge-spec the plugins depend on from `find_links` (this tree's wheel: not on an index yet)."""
    shutil.rmtree(venv, ignore_errors=True)
    if _run([sys.executable, "-m", "venv", str(venv)], log).returncode != 0:
        return "cannot create a venv"
    python = venv / "bin" / "python"
    name = import_name(wheel)
    if name == "opforge_torch":
        if torch_site is None:
            return "no torch to smoke-test opforge_torch with"
        site = next((venv / "lib").glob("python3*/site-packages"))
        (site / "matrix_torch.pth").write_text(f"{torch_site}\n")
    # torch comes from the matrix's torch venv (5.6 GB, not reinstalled); other deps from the index
    no_deps = ["--no-deps"] if name == "opforge_torch" else []
    links = ["--find-links", find_links] if find_links else []
    done = _run([str(python), "-m", "pip", "install", "--quiet", *no_deps, *links, str(wheel)], log)
    if done.returncode != 0:
        return f"pip install {wheel.name} failed"
    code = SMOKE.get(name, f"import {name}")
    done = _run([str(python), "-c", code], log, cwd=str(venv))
    return None if done.returncode == 0 else \
        f"smoke test failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}"


def repair_and_check(wheels: list[str], out: Path, tools: Path, log: Path,
                     torch_site: Path | None = None, find_links: str | None = None) -> list[dict]:
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for wheel in map(Path, wheels):
        name = import_name(wheel)
        repaired, error = repair(wheel, out / "repaired", tools, log)
        if repaired is None:
            results.append({"name": name, "ok": False, "summary": f"{name}: repair: {error}"})
            continue
        unpacked = out / "unpacked" / name
        shutil.rmtree(unpacked, ignore_errors=True)
        with zipfile.ZipFile(repaired) as archive:
            archive.extractall(unpacked)
        problems = []
        platform = platform_problem(repaired, unpacked, tools, log)
        if platform:
            problems.append(platform)
        problems += [f"bundles {lib}" for lib in bundled_runtimes(repaired)]
        problems += tag_problems(repaired.name)
        declared = declared_runtimes(repaired)
        for lib in sorted(unpacked.rglob("*.so*")):
            if lib.is_file() and re.search(r"\.so(\.\d+)*$", lib.name) and ".libs" not in lib.parent.name:
                dynamic = _run(["readelf", "-d", str(lib)], log).stdout
                problems += check_library(lib, log, dynamic)
                problems += undeclared_cudart(lib.name, dynamic, declared)
        failure = smoke(repaired, out / "smoke" / name, log, torch_site=torch_site, find_links=find_links)
        if failure:
            problems.append(failure)
        tag = repaired.name.rsplit("-", 1)[-1].removesuffix(".whl")
        summary = f"{name}: {tag}, " + ("; ".join(problems) if problems else "ok")
        results.append({"name": name, "ok": not problems, "summary": summary,
                        "wheel": str(repaired)})
    return results
