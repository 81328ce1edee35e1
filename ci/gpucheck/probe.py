"""What the GPU machine has (a Probe): its python's torch, ONNX Runtime and their CUDA, the toolkit, compute-sanitizer, what --prepare carried."""
from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from ci.gpucheck import carried as carried_folder

SYSTEM_CUDA = Path("/usr/local/cuda")   # where CUDA_HOME is unset (as ci.provision.toolkits)


@dataclasses.dataclass(frozen=True)
class Probe:
    """What this machine has. Empty strings mean "not there"."""

    python: str
    cores: int
    torch: str = ""
    torch_cuda: str = ""
    gpu: str = ""
    capability: str = ""         # "9.0"
    no_gpu: str = ""             # why there is no GPU to use ("" when there is one)
    cuda_home: str = ""          # a toolkit root with bin/nvcc
    nvcc: str = ""               # its release, "13.0"
    sanitizer: str = ""          # compute-sanitizer's path
    pytest: bool = False
    xdist: bool = False
    onnxruntime: str = ""
    ort_cuda_ep: bool = False
    scikit_build_core: str = ""
    liger: str = ""
    cuda_runtime_dir: str = ""   # torch's CUDA runtime wheel's lib/ (libcudart for opforge_ort)
    carried_wheels: tuple = ()   # file names in CARRIED/wheels, as its carried.json lists them
    ort_include: str = ""        # a folder holding onnxruntime_c_api.h


# Run in a child python: importing torch (and CUDA's initialization) stays out of this process.
PYTHON_FACTS = r"""
import importlib.metadata as md, importlib.util, json, pathlib
facts = {}
def version(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return ""
try:
    import torch
    facts["torch"], facts["torch_cuda"] = torch.__version__, torch.version.cuda or ""
    if torch.cuda.is_available():
        facts["gpu"] = torch.cuda.get_device_name(0)
        facts["capability"] = "%d.%d" % torch.cuda.get_device_capability(0)
    else:
        build = "CUDA %s build" % torch.version.cuda if torch.version.cuda else "a CPU-only build"
        facts["no_gpu"] = "torch %s (%s): torch.cuda.is_available() is False" % (torch.__version__, build)
    nvidia = pathlib.Path(torch.__file__).resolve().parent.parent / "nvidia"
    libs = sorted(str(p.parent) for p in nvidia.glob("*/lib/libcudart.so*"))
    facts["cuda_runtime_dir"] = libs[-1] if libs else ""
except Exception as err:
    facts["no_gpu"] = "torch is not importable in this python: %s: %s" % (type(err).__name__, err)
try:
    import onnxruntime
    facts["onnxruntime"] = onnxruntime.__version__
    facts["ort_cuda_ep"] = "CUDAExecutionProvider" in onnxruntime.get_available_providers()
except Exception:
    pass
facts["pytest"] = importlib.util.find_spec("pytest") is not None
facts["xdist"] = importlib.util.find_spec("xdist") is not None
facts["scikit_build_core"] = version("scikit-build-core")
facts["liger"] = version("liger-kernel")
print(json.dumps(facts))
"""


def python_facts(python: str) -> dict:
    try:
        done = subprocess.run([python, "-c", PYTHON_FACTS], capture_output=True, text=True,
                              timeout=120)
    except (OSError, subprocess.TimeoutExpired) as err:
        return {"no_gpu": f"{python} did not answer: {err}"}
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return {"no_gpu": f"{python} failed: {done.stderr.strip()[-300:]}"}
    return json.loads(lines[-1])


def cuda_home() -> str:
    """OPFORGE_CUDA_HOME, else CUDA_HOME or /usr/local/cuda, else nvcc on PATH: the first holding bin/nvcc."""
    roots = [os.environ.get("OPFORGE_CUDA_HOME"), os.environ.get("CUDA_HOME") or str(SYSTEM_CUDA)]
    on_path = shutil.which("nvcc")
    roots.append(str(Path(on_path).resolve().parent.parent) if on_path else None)
    return next((r for r in roots if r and (Path(r) / "bin" / "nvcc").is_file()), "")


def nvcc_release(home: str) -> str:
    """'13.0' from `nvcc --version` ('Cuda compilation tools, release 13.0, V13.0.88'); "" if none."""
    if not home:
        return ""
    try:
        done = subprocess.run([str(Path(home) / "bin" / "nvcc"), "--version"], capture_output=True,
                              text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    found = re.search(r"release (\d+\.\d+)", done.stdout)
    return found.group(1) if done.returncode == 0 and found else ""


def sanitizer_path(home: str) -> str:
    candidates = [shutil.which("compute-sanitizer")]
    if home:
        candidates += [str(Path(home) / "bin" / "compute-sanitizer"),
                       str(Path(home) / "compute-sanitizer" / "compute-sanitizer")]
    return next((c for c in candidates if c and Path(c).is_file()), "")


def ort_include(carried: carried_folder.Carried) -> str:
    """OPFORGE_ORT_INCLUDE_DIR where it holds the C API, else the verified carried headers."""
    folder = os.environ.get("OPFORGE_ORT_INCLUDE_DIR")
    if folder and (Path(folder) / "onnxruntime_c_api.h").is_file():
        return folder
    return carried.ort_include


def probe(carried: Path, python: str = sys.executable) -> Probe:
    """This machine; the carried folder only as --prepare recorded it (else UsageError, before
    anything runs)."""
    verified = carried_folder.verify(carried)
    facts = python_facts(python)
    known = {f.name for f in dataclasses.fields(Probe)}
    home = cuda_home()
    return Probe(python=python, cores=len(os.sched_getaffinity(0)), cuda_home=home,
                 nvcc=nvcc_release(home), sanitizer=sanitizer_path(home),
                 carried_wheels=verified.wheels, ort_include=ort_include(verified),
                 **{k: v for k, v in facts.items() if k in known})
