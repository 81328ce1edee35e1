"""What this machine can run: toolkits, GPU, TensorRT runtime, glibc, Python, podman (the facts
the plan's skip decision reads: ci/engine/plan.py).

    python -m ci.probe            # the facts, one per line
    python -m ci.probe --json
"""
from __future__ import annotations

import argparse
import ctypes.util
import dataclasses
import glob
import json
import platform
import shutil
import subprocess
import sys
from collections.abc import Mapping

from ci import model as mx
from ci.provision import toolkits


@dataclasses.dataclass(frozen=True)
class Fact:
    ok: bool
    detail: str


@dataclasses.dataclass(frozen=True)
class Host:
    python: str
    glibc: str
    gpu: Fact
    tensorrt: Fact
    podman: Fact
    toolkits: Mapping[str, Fact]     # toolkit id -> available?
    system_nvcc: Fact

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def _run(command: list[str]) -> tuple[int, str]:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 127, str(exc)
    return done.returncode, (done.stdout + done.stderr).strip()


def probe_gpu() -> Fact:
    smi = shutil.which("nvidia-smi")
    if smi:
        code, out = _run([smi, "-L"])
        gpus = [line for line in out.splitlines() if line.startswith("GPU ")]
        if code == 0 and gpus:
            return Fact(True, "; ".join(gpus))
        return Fact(False, f"no GPU: nvidia-smi lists no device ({out.splitlines()[0] if out else code})")
    if glob.glob("/dev/nvidia[0-9]*"):
        return Fact(True, "device nodes /dev/nvidia* present (no nvidia-smi)")
    return Fact(False, "no GPU: no nvidia-smi and no /dev/nvidia* device")


def probe_tensorrt() -> Fact:
    name = ctypes.util.find_library("nvinfer")
    if name:
        return Fact(True, name)
    return Fact(False, "no TensorRT runtime: libnvinfer is not installed")


def probe_podman() -> Fact:
    podman = shutil.which("podman")
    if not podman:
        return Fact(False, "podman not installed")
    code, out = _run([podman, "--version"])
    return Fact(code == 0, out.splitlines()[0] if out else f"exit {code}")


def probe_system_nvcc() -> Fact:
    root = toolkits.system_root()
    nvcc = root / "bin" / "nvcc"
    if not nvcc.is_file():
        return Fact(False, f"no nvcc at {nvcc}")
    try:
        return Fact(True, f"CUDA {toolkits.nvcc_version(nvcc)} at {root}")
    except toolkits.ToolkitError as exc:
        return Fact(False, str(exc))


def probe_toolkits(matrix: mx.Matrix) -> dict[str, Fact]:
    found = {}
    for tid, spec in matrix.toolkits.items():       # ToolkitSpecs, validated by the schema
        result = toolkits.probe(spec)
        state = "cached" if result.cached else "obtainable" if result.available else "unavailable"
        found[tid] = Fact(result.available, f"{state}: {result.reason}")
    return found


def probe(matrix: mx.Matrix) -> Host:
    libc, libc_version = platform.libc_ver()
    return Host(python=platform.python_version(), glibc=f"{libc} {libc_version}".strip(),
                gpu=probe_gpu(), tensorrt=probe_tensorrt(), podman=probe_podman(),
                toolkits=probe_toolkits(matrix), system_nvcc=probe_system_nvcc())


def render(host: Host) -> str:
    lines = [f"python       {host.python}", f"glibc        {host.glibc}",
             f"gpu          {'yes' if host.gpu.ok else 'no'}: {host.gpu.detail}",
             f"tensorrt     {'yes' if host.tensorrt.ok else 'no'}: {host.tensorrt.detail}",
             f"podman       {host.podman.detail}",
             f"system nvcc  {host.system_nvcc.detail}"]
    for tid, fact in host.toolkits.items():
        lines.append(f"toolkit      {tid}: {fact.detail}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ci.probe", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    try:
        host = probe(mx.load())
    except mx.MatrixError as exc:
        print(exc, file=sys.stderr)
        return 2  # a bad matrix.yaml is a usage error, as in ci.model and the runner
    print(json.dumps(host.to_json(), indent=2) if args.json else render(host))
    return 0


if __name__ == "__main__":
    sys.exit(main())
