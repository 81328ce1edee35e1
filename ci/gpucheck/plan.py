"""The GPU check's parts for a Probe and a Layout: build, the GPU tests, memcheck, the bench; each runs or says why it is skipped."""
from __future__ import annotations

import dataclasses
import os
import shlex
from pathlib import Path

from ci.gpucheck.common import NO_GPU, REPO
from ci.gpucheck.probe import Probe


@dataclasses.dataclass(frozen=True)
class Layout:
    out: Path
    work: Path
    carried: Path

    @property
    def sites(self) -> list:
        return [self.work / "site" / name for name in ("carried", "torch", "ort")]

    @property
    def bench(self) -> Path:
        return self.out / "bench"

    def pythonpath(self) -> str:
        return os.pathsep.join(str(p) for p in [*self.sites, REPO / "kernels"])


@dataclasses.dataclass(frozen=True)
class Part:
    name: str
    what: str
    group: int                   # the parts of one group run at the same time, groups in order
    budget_s: int
    command: tuple = ()
    env: tuple = ()              # (name, value) pairs added to the environment
    after: tuple = ()            # parts that must have passed
    skip: str = ""               # why it cannot run here ("" when it can)
    junit: str = ""              # pytest parts: their JUnit report, read for counts and skips
    none_selected: str = ""      # when pytest selects no test (exit 5): skipped for this reason
    needs_cuda_tests: bool = False  # on a GPU, some test named *cuda* must have passed
    memcheck: bool = False       # runs under compute-sanitizer: its error summary is read


def no_gpu_reason(p: Probe) -> str:
    return NO_GPU if not p.gpu else ""


def _toolkit_reason(p: Probe) -> str:
    if not p.cuda_home:
        return "no nvcc (set CUDA_HOME or OPFORGE_CUDA_HOME to a CUDA toolkit)"
    if p.torch_cuda and p.nvcc and p.nvcc.split(".")[0] != p.torch_cuda.split(".")[0]:
        return f"nvcc {p.nvcc}, but torch is built for CUDA {p.torch_cuda} (the majors must match)"
    return ""


def _pip_install(p: Probe, target: Path, source: Path) -> tuple:
    return (p.python, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "--no-index",
            "--no-cache-dir", "--disable-pip-version-check", "--target", str(target), str(source))


def _build_env(p: Probe, layout: Layout) -> tuple:
    return (("OPFORGE_CUDA_HOME", p.cuda_home), ("CUDA_HOME", p.cuda_home),
            ("OPFORGE_CUDA_ARCHS", p.capability), ("MAX_JOBS", str(p.cores)),
            ("CMAKE_BUILD_PARALLEL_LEVEL", str(p.cores)), ("PYTHONPATH", layout.pythonpath()))


def _run_env(p: Probe, layout: Layout) -> tuple:
    libs = os.pathsep.join(x for x in (p.cuda_runtime_dir, os.environ.get("LD_LIBRARY_PATH")) if x)
    return (("OPFORGE_REQUIRE_GPU", "1"), ("OPFORGE_CUDA_HOME", p.cuda_home),
            ("CUDA_HOME", p.cuda_home), ("PYTHONPATH", layout.pythonpath()),
            ("LD_LIBRARY_PATH", libs), ("PYTHONUNBUFFERED", "1"))


def _pytest(p: Probe, layout: Layout, name: str, paths, workers: int, *extra) -> tuple:
    xdist = ("-n", str(workers)) if p.xdist and workers > 1 else ()
    return (p.python, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
            f"--junitxml={layout.work / 'junit' / f'{name}.xml'}", *xdist, *extra,
            *(str(REPO / x) for x in paths))


def carried_part(p: Probe, layout: Layout) -> Part:
    skip = no_gpu_reason(p) or ("" if p.carried_wheels else
                                f"no wheels in {layout.carried / 'wheels'} (python3 ci/gpu_check.py "
                                "--prepare DIR gathers them; then --carried DIR)")
    wheels = tuple(str(layout.carried / "wheels" / w) for w in p.carried_wheels)
    return Part("carried", f"install the carried wheels ({', '.join(p.carried_wheels) or 'none'})",
                0, 60, (p.python, "-m", "pip", "install", "--no-index", "--no-deps", "--no-compile",
                        "--disable-pip-version-check", "--target", str(layout.sites[0]), *wheels),
                skip=skip)


def build_parts(p: Probe, layout: Layout) -> list:
    toolkit = no_gpu_reason(p) or _toolkit_reason(p)
    arch = f"sm_{p.capability.replace('.', '')}" if p.capability else "the local SM"
    return [
        Part("build-torch", f"opforge_torch with CUDA for {arch} only, against this torch", 1, 200,
             _pip_install(p, layout.sites[1], REPO / "packages" / "torch_ext"),
             _build_env(p, layout), skip=toolkit),
        Part("build-ort", f"the ONNX Runtime plugin with CUDA for {arch} only", 1, 200,
             _pip_install(p, layout.sites[2], REPO / "packages" / "ort_plugin"),
             (*_build_env(p, layout), ("OPFORGE_ORT_INCLUDE_DIR", p.ort_include)),
             after=("carried",), skip=toolkit or _ort_build_reason(p)),
    ]


def _carries_build_backend(p: Probe) -> bool:
    return any(w.startswith("scikit_build_core-") for w in p.carried_wheels)


def _ort_build_reason(p: Probe) -> str:
    if not p.ort_include:
        return ("no ONNX Runtime C headers (--prepare DIR carries the pinned ones in "
                "DIR/ort-include; or set OPFORGE_ORT_INCLUDE_DIR)")
    if not (p.scikit_build_core or _carries_build_backend(p)):
        return "scikit-build-core is not installed and no wheel of it is carried (--prepare DIR)"
    if not any(w.startswith("opforge_spec-") for w in p.carried_wheels):
        return "no opforge-spec wheel is carried (--prepare DIR builds one of kernels/)"
    return ""


def _ort_cuda_reason(p: Probe) -> str:
    if not p.onnxruntime:
        return "onnxruntime is not installed"
    if not p.ort_cuda_ep:
        return (f"onnxruntime {p.onnxruntime} has no CUDAExecutionProvider (a CPU build): the "
                "plugin's CUDA kernels need onnxruntime-gpu")
    return ""


def check_parts(p: Probe, layout: Layout) -> list:
    base = no_gpu_reason(p) or ("" if p.pytest else "pytest is not installed")
    env = _run_env(p, layout)
    workers = max(1, p.cores // 4)
    sanitize = base or ("" if p.sanitizer else "compute-sanitizer not found (PATH, the toolkit's bin/)")
    memcheck = (p.sanitizer, "--tool", "memcheck", "--error-exitcode", "1", "--target-processes",
                "all", "--print-limit", "20")
    # without the caching allocator every tensor is its own allocation: memcheck sees an access
    # past a tensor's end instead of landing in a neighbour's block
    sanitize_env = (*env, ("PYTORCH_NO_CUDA_MEMORY_CACHING", "1"))
    cuda_cases = ("-k", "cuda or gpu", "-x")
    return [
        Part("tests-torch", "opforge_torch's tests on the GPU (every op x fp32/fp16/bf16 vs the "
             "spec, autograd, torch.compile, .out)", 2, 150,
             _pytest(p, layout, "tests-torch", ["packages/torch_ext/tests"], workers), env,
             after=("build-torch",), skip=base, junit="tests-torch", needs_cuda_tests=True),
        Part("tests-kernels", "kernels/tests (the GPU-only kernel tests among them)", 2, 150,
             _pytest(p, layout, "tests-kernels", ["kernels/tests"], workers), env, skip=base,
             junit="tests-kernels"),
        Part("tests-ort-cuda", "the ORT plugin's CUDA EP tests", 2, 150,
             _pytest(p, layout, "tests-ort-cuda", ["packages/ort_plugin/tests/test_ort_cuda.py"], 1),
             env, after=("build-ort",), skip=base or _ort_cuda_reason(p), junit="tests-ort-cuda"),
        Part("sanitizer-torch", "opforge_torch's CUDA tests (the spec's small cases) under "
             "compute-sanitizer memcheck", 2, 150,
             (*memcheck, *_pytest(p, layout, "sanitizer-torch", ["packages/torch_ext/tests"], 1,
                                  *cuda_cases)),
             sanitize_env, after=("build-torch",), skip=sanitize, junit="sanitizer-torch",
             memcheck=True),
        # kernels/tests/gpu holds the GPU-only tests; its 2^31-element cases take ~13 GB, too
        # slow under memcheck
        Part("sanitizer-kernels", "the GPU kernel tests (kernels/tests/gpu) under "
             "compute-sanitizer memcheck", 2, 150,
             (*memcheck, *_pytest(p, layout, "sanitizer-kernels", ["kernels/tests/gpu"], 1,
                                  "-k", "not beyond_2_pow_31", "-x")),
             sanitize_env, skip=sanitize, junit="sanitizer-kernels", memcheck=True,
             none_selected="kernels/tests/gpu selected no test"),
    ]


def bench_part(p: Probe, layout: Layout) -> Part:
    return Part("bench", "the GPU bench's quick set (bench/run.py --device cuda --quick)", 3, 180,
                (p.python, str(REPO / "bench" / "run.py"), "--device", "cuda", "--quick", "--out",
                 str(layout.bench), "--time-limit", "{time_limit}"),
                _run_env(p, layout), after=("build-torch",), skip=no_gpu_reason(p))


def plan(p: Probe, layout: Layout) -> list:
    return [carried_part(p, layout), *build_parts(p, layout), *check_parts(p, layout),
            bench_part(p, layout)]


def render_plan(p: Probe, parts: list) -> str:
    lines = [f"gpu-check plan on {machine_line(p)}"]
    for part in parts:
        lines.append(f"  {part.name:<18} {part.what}")
        if part.skip:
            lines.append(f"  {'':<18} skipped: {part.skip}")
            continue
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in part.env if k != "PYTHONPATH")
        command = f"{env} {shlex.join(part.command)}".strip()
        after = f" after {', '.join(part.after)};" if part.after else ""
        lines.append(f"  {'':<18} step {part.group},{after} budget {part.budget_s} s: {command}")
    return "\n".join(lines)


def machine_line(p: Probe) -> str:
    gpu = f"{p.gpu} (sm_{p.capability.replace('.', '')})" if p.gpu else f"no GPU ({p.no_gpu})"
    return (f"{gpu}; python {p.python}; torch {p.torch or 'not importable'}"
            f"{' CUDA ' + p.torch_cuda if p.torch_cuda else ''}; nvcc {p.nvcc or 'none'}; "
            f"compute-sanitizer {'yes' if p.sanitizer else 'none'}; onnxruntime "
            f"{p.onnxruntime or 'none'} (CUDA EP {'yes' if p.ort_cuda_ep else 'no'}); {p.cores} cores")
