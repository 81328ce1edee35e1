"""Stable-ABI proof across torch releases, as two matrix stages.

  probe --out DIR        (in each torch venv) copies the installed libopforge_torch.so.1 and notes
                         which python, torch and build it belongs to
  cross --probes DIRS --out DIR
                         loads every probed library into every *other* torch release's python
                         and runs both ops there: built with one torch, tested with another

A CUDA build is only tried in a torch of the same CUDA major (it needs that CUDA runtime);
pairs that cannot meet are recorded as skipped with the reason, never as passed.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

LOAD_AND_RUN = """
import sys, torch
torch.ops.load_library(sys.argv[1])
assert "opforge_torch" not in sys.modules
x = torch.linspace(-3, 3, 11)
w = torch.rand(11) + 0.5
y = torch.ops.opforge.swish(x, 1.0)
assert torch.allclose(y, x * torch.sigmoid(x), rtol=1e-5, atol=1e-6), y
r = torch.ops.opforge.rms_norm(x[None], w, 1e-6)
assert torch.allclose(r, x * torch.rsqrt(x.pow(2).mean() + 1e-6) * w, rtol=1e-4, atol=1e-5), r
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


def cross(probe_dirs: list[Path], out: Path) -> int:
    probes = [json.loads((d / "probe.json").read_text()) for d in probe_dirs]
    hosts = list({p["python"]: p for p in probes}.values())  # cells share venvs
    numbers, lines, failed, passed = {}, [], 0, 0
    for lib in probes:
        for host in hosts:
            name = f"{lib['build']['variant']}@{lib['torch']}->torch{host['torch']}"
            reason = _why_not(lib, host)
            if reason:
                if reason != "same torch release":
                    lines.append(f"skipped  {name}: {reason}")
                continue
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
