"""Stable-ABI proof across torch releases, as two matrix stages.

  probe --out DIR        (in each torch venv) copies the installed libopforge_torch.so.1 and notes
                         which python, torch and build it belongs to
  cross --probes DIRS --out DIR
                         loads every probed library into every *other* torch release's python
                         and runs both ops there: built with one torch, tested with another

A CUDA build is only tried in a torch of the same CUDA major (it needs that CUDA runtime);
pairs that cannot meet are recorded as skipped with the reason, never as passed. For such a pair
the CPU variant is built against the CUDA build's torch (its own venv, a copy of the sources) and
tried in the other torch instead, so the newest torch's build is proved in a CPU-only (or other
CUDA major) oldest torch too: every pair of releases is crossed in both directions.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

TORCH_EXT = Path(__file__).resolve().parents[1]
KERNELS_INCLUDE = TORCH_EXT.parent.parent / "kernels" / "include"

LOAD_AND_RUN = """
import sys, torch
torch.ops.load_library(sys.argv[1])
assert "opforge_torch" not in sys.modules
x = torch.linspace(-3, 3, 11)
w = torch.rand(11, generator=torch.Generator().manual_seed(0)) + 0.5
y = torch.ops.opforge.swish(x, 1.0)
assert torch.allclose(y, x * torch.sigmoid(x), rtol=1e-5, atol=1e-6), y  # the spec's float32 Swish
r = torch.ops.opforge.rms_norm(x[None], w, 1e-6)
assert torch.allclose(r, x * torch.rsqrt(x.pow(2).mean() + 1e-6) * w, rtol=1e-4, atol=1e-5), r  # RMSNorm's
print(torch.__version__)
"""


def probe(out: Path) -> int:
    import torch

    import opforge_torch

    out.mkdir(parents=True, exist_ok=True)
    # The torch venv is shared by cells building other variants: keep this build's own copy.
    library = out / Path(opforge_torch.library_path()).name
    shutil.copy2(opforge_torch.library_path(), library)
    info = {"python": sys.executable, "torch": torch.__version__, "torch_cuda": torch.version.cuda,
            "library": str(library), "build": opforge_torch.build_info()}
    (out / "probe.json").write_text(json.dumps(info, indent=1))
    print(f"probe: {info['build']['variant']} built with torch {info['build']['torch_built_against']}")
    return 0


def _major(version: str | None) -> str | None:
    return version.split(".")[0] if version else None


def _why_not(lib: dict, host: dict) -> str:
    if lib["torch"].split("+")[0] == host["torch"].split("+")[0]:
        return "same torch release"
    cuda = lib["build"]["cuda"]
    if cuda and _major(cuda) != _major(host["torch_cuda"]):
        return f"a CUDA {cuda} build needs a torch with CUDA {_major(cuda)}.x (torch {host['torch']} has {host['torch_cuda']})"
    return ""


def _cpu_build(lib: dict, out: Path) -> dict:
    """The CPU variant built against `lib`'s torch, in its python (a probe dict like `lib`)."""
    work = out / f"cpu-build-torch{lib['torch'].split('+')[0]}"
    shutil.rmtree(work, ignore_errors=True)
    src = work / "src"
    shutil.copytree(TORCH_EXT, src, ignore=shutil.ignore_patterns(
        "build", "dist", "*.egg-info", "__pycache__", "*.so*", "_build_info.json"))
    env = {**os.environ, "OPFORGE_CUDA_HOME": "", "OPFORGE_LOCAL_VERSION": "",
           "OPFORGE_KERNELS_INCLUDE_DIR": str(KERNELS_INCLUDE)}
    run = subprocess.run([lib["python"], "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
                          "--no-index", "-w", str(work / "dist"), str(src)],
                         capture_output=True, text=True, timeout=900, env=env)
    if run.returncode:
        raise RuntimeError(f"CPU build against torch {lib['torch']} failed:\n"
                           f"{(run.stdout + run.stderr)[-3000:]}")
    wheel = next((work / "dist").glob("opforge_torch-*.whl"))
    library = work / Path(lib["library"]).name
    with zipfile.ZipFile(wheel) as zf:
        library.write_bytes(zf.read(f"opforge_torch/{library.name}"))
        build = json.loads(zf.read("opforge_torch/_build_info.json"))
    assert build["cuda"] is None, build
    assert build["torch_built_against"].split("+")[0] == lib["torch"].split("+")[0], build
    return {**lib, "library": str(library), "build": build}


def cross(probe_dirs: list[Path], out: Path) -> int:
    probes = [json.loads((d / "probe.json").read_text()) for d in probe_dirs]
    hosts = list({p["python"]: p for p in probes}.values())  # cells share venvs
    numbers, lines, failed, passed = {}, [], 0, 0
    cpu_builds: dict[str, dict] = {}  # torch release -> its CPU build (stand-in for a CUDA one)
    tried = set()
    for built in probes:
        for host in hosts:
            lib = built
            name = f"{lib['build']['variant']}@{lib['torch']}->torch{host['torch']}"
            reason = _why_not(lib, host)
            if reason and reason != "same torch release":
                lines.append(f"skipped  {name}: {reason}")
                release = lib["torch"].split("+")[0]
                if release not in cpu_builds:
                    try:
                        cpu_builds[release] = _cpu_build(lib, out)
                    except (RuntimeError, OSError, StopIteration, KeyError, AssertionError,
                            subprocess.TimeoutExpired) as err:
                        cpu_builds[release] = {"error": str(err)}
                cpu = cpu_builds[release]
                name = f"{cpu.get('build', {}).get('variant', 'cpu')}@{lib['torch']}->torch{host['torch']}"
                if "error" in cpu:
                    failed += 1
                    numbers[f"cross_torch.{name}"] = 0
                    lines.append(f"FAIL     {name} (instead)\n{cpu['error']}")
                    continue
                lib, reason = cpu, _why_not(cpu, host)
                lines[-1] += f"; its CPU variant instead: {name}"
            if reason:
                continue
            if (lib["library"], host["python"]) in tried:
                continue
            tried.add((lib["library"], host["python"]))
            run = subprocess.run([host["python"], "-c", LOAD_AND_RUN, lib["library"]],
                                 capture_output=True, text=True, timeout=300)
            ok = run.returncode == 0
            passed, failed = passed + ok, failed + (not ok)
            numbers[f"cross_torch.{name}"] = int(ok)
            lines.append(f"{'pass' if ok else 'FAIL'}     {name}" + ("" if ok else f"\n{run.stderr[-2000:]}"))
    print("\n".join(lines) or "no pair of torch releases to cross")
    result = os.environ.get("OPFORGE_STAGE_RESULT")
    if result:
        Path(result).write_text(json.dumps({"numbers": {**numbers, "cross_torch.passed": passed,
                                                        "cross_torch.failed": failed}}))
    out.mkdir(parents=True, exist_ok=True)
    (out / "cross_torch.txt").write_text("\n".join(lines) + "\n")
    if failed:
        return 1
    if not passed:
        print("cross-torch: no library could be tried in another torch release", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("probe")
    p.add_argument("--out", type=Path, required=True)
    c = sub.add_parser("cross")
    c.add_argument("--probes", required=True, help="probe folders joined by os.pathsep")
    c.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "probe":
        return probe(args.out)
    return cross([Path(p) for p in args.probes.split(os.pathsep) if p], args.out)


if __name__ == "__main__":
    sys.exit(main())
