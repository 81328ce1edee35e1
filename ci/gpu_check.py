"""The GPU check: one command for a bare GPU machine (no network, a CUDA torch preinstalled).

    python3 ci/gpu_check.py OUT [--carried DIR] [--budget 480] [--work DIR]
    python3 ci/gpu_check.py --dry-run             # the plan: what runs, what is skipped and why
    python3 ci/gpu_check.py --prepare DIR         # where there is a network: what to bring along

It builds opforge_torch and the ONNX Runtime plugin with CUDA for the local GPU's SM only (into a
private folder; the machine's torch is used), runs the GPU tests (packages/torch_ext/tests with
OPFORGE_REQUIRE_GPU=1, kernels/tests, the ORT plugin's CUDA tests where ONNX Runtime has its CUDA
EP), runs the spec's small CUDA cases once more under `compute-sanitizer --tool memcheck`, runs
the GPU bench's quick set, and writes OUT/report.md and OUT/report.json (the bench's files in
OUT/bench/, every part's log in OUT/check.log: 6 files). Every part it cannot run says
`skipped: <reason>`; it exits 1 only when a part failed, and stays within --budget seconds.

The plan and the report are functions of a Probe (what this machine has): tests/ci/test_gpu_check.py
drives them with probes it makes up, and the real probe on the machine it runs on. Standard
library only: it runs under whatever python3 holds the machine's torch.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ci import toolkits  # noqa: E402  (standard library only, like this file)

DEFAULT_CARRIED = REPO / "build" / "gpu-carried"
DEFAULT_WORK = REPO / "build" / "gpu-check"
BUDGET_S = 480
REPORT_RESERVE_S = 15    # kept back from the parts for the report
MIN_PART_S = 20          # a part that would get less is skipped, not started
BENCH_MARGIN_S = 40      # the bench's own time limit is its timeout less this (its last shape)
LOG_TAIL_BYTES = 1 << 20  # of each part's log in OUT/check.log
NO_GPU = "no GPU"
NO_GPU_SKIP = re.compile(r"\bno GPU\b", re.IGNORECASE)
STARTED = time.monotonic()


def progress(message: str) -> None:
    print(f"[gpu-check {time.monotonic() - STARTED:4.0f} s] {message}", flush=True)


def bench_report():
    """bench/opforge_bench/gpu_report.py (no torch; the op names come from kernels/opforge_spec)."""
    for folder in (REPO / "kernels", REPO / "bench"):
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
    from opforge_bench import gpu_report

    return gpu_report


# ---------------------------------------------------------------------------------------- probe

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
    carried_wheels: tuple = ()   # file names in CARRIED/wheels
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
    """OPFORGE_CUDA_HOME, else CUDA_HOME or the standard root (ci.toolkits), else nvcc on PATH."""
    roots = [os.environ.get("OPFORGE_CUDA_HOME"), str(toolkits.system_root())]
    on_path = shutil.which("nvcc")
    roots.append(str(Path(on_path).resolve().parent.parent) if on_path else None)
    return next((r for r in roots if r and (Path(r) / "bin" / "nvcc").is_file()), "")


def nvcc_release(home: str) -> str:
    if not home:
        return ""
    try:
        return toolkits.nvcc_version(Path(home) / "bin" / "nvcc")
    except toolkits.ToolkitError:
        return ""


def sanitizer_path(home: str) -> str:
    candidates = [shutil.which("compute-sanitizer")]
    if home:
        candidates += [str(Path(home) / "bin" / "compute-sanitizer"),
                       str(Path(home) / "compute-sanitizer" / "compute-sanitizer")]
    return next((c for c in candidates if c and Path(c).is_file()), "")


def carried_ort_include(carried: Path) -> str:
    for folder in (os.environ.get("OPFORGE_ORT_INCLUDE_DIR"), str(carried / "ort-include")):
        if folder and (Path(folder) / "onnxruntime_c_api.h").is_file():
            return folder
    return ""


def probe(carried: Path, python: str = sys.executable) -> Probe:
    facts = python_facts(python)
    known = {f.name for f in dataclasses.fields(Probe)}
    home = cuda_home()
    wheels = tuple(sorted(p.name for p in (carried / "wheels").glob("*.whl")))
    return Probe(python=python, cores=len(os.sched_getaffinity(0)), cuda_home=home,
                 nvcc=nvcc_release(home), sanitizer=sanitizer_path(home), carried_wheels=wheels,
                 ort_include=carried_ort_include(carried),
                 **{k: v for k, v in facts.items() if k in known})


# ----------------------------------------------------------------------------------------- plan

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
    sk_carried = _carries_build_backend(p)
    arch = f"sm_{p.capability.replace('.', '')}" if p.capability else "the local SM"
    return [
        Part("build-torch", f"opforge_torch with CUDA for {arch} only, against this torch", 1, 200,
             _pip_install(p, layout.sites[1], REPO / "packages" / "torch_ext"),
             _build_env(p, layout), skip=toolkit),
        Part("build-ort", f"the ONNX Runtime plugin with CUDA for {arch} only", 1, 200,
             _pip_install(p, layout.sites[2], REPO / "packages" / "ort_plugin"),
             (*_build_env(p, layout), ("OPFORGE_ORT_INCLUDE_DIR", p.ort_include)),
             after=("carried",) if sk_carried and not p.scikit_build_core else (),
             skip=toolkit or _ort_build_reason(p)),
    ]


def _carries_build_backend(p: Probe) -> bool:
    return any(w.startswith("scikit_build_core-") for w in p.carried_wheels)


def _ort_build_reason(p: Probe) -> str:
    if not p.ort_include:
        return ("no ONNX Runtime C headers (--prepare DIR carries the pinned ones in "
                "DIR/ort-include; or set OPFORGE_ORT_INCLUDE_DIR)")
    if not (p.scikit_build_core or _carries_build_backend(p)):
        return "scikit-build-core is not installed and no wheel of it is carried (--prepare DIR)"
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


# ------------------------------------------------------------------------------------ execution

@dataclasses.dataclass
class Result:
    name: str
    status: str                  # pass | fail | skipped
    detail: str = ""
    seconds: float = 0.0
    numbers: dict = dataclasses.field(default_factory=dict)
    log: str = ""


def blocked(part: Part, done: dict) -> str:
    for name in part.after:
        if done[name].status != "pass":
            why = f" ({done[name].detail})" if done[name].status == "skipped" else ""
            return f"{name} {'failed' if done[name].status == 'fail' else 'skipped'}{why}"
    return ""


def execute(parts: list, layout: Layout, probe_: Probe, *, budget_s: float) -> list:
    """Every part, group by group (the parts of a group at once), within the budget."""
    deadline = time.monotonic() + budget_s - REPORT_RESERVE_S
    done = {}
    for group in sorted({part.group for part in parts}):
        ready = []
        for part in (x for x in parts if x.group == group):
            left = deadline - time.monotonic()
            why = part.skip or blocked(part, done) or (
                f"the {budget_s:.0f} s budget was spent before it could start" if left < MIN_PART_S else "")
            if why:
                done[part.name] = Result(part.name, "skipped", why)
                progress(f"{part.name}: skipped: {why}")
            else:
                ready.append((part, int(min(part.budget_s, left))))
        with concurrent.futures.ThreadPoolExecutor(max(1, len(ready))) as pool:
            for result in pool.map(lambda job: run_part(*job, layout, probe_), ready):
                done[result.name] = result
    return [done[part.name] for part in parts]


def run_part(part: Part, timeout: int, layout: Layout, probe_: Probe) -> Result:
    log = layout.work / "logs" / f"{part.name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    command = [a.replace("{time_limit}", str(max(10, timeout - BENCH_MARGIN_S))) for a in part.command]
    progress(f"{part.name}: start (budget {timeout} s)")
    started = time.monotonic()
    code = run_logged(command, {**os.environ, **dict(part.env)}, log, timeout)
    result = judge(part, code, probe_, layout, timeout)
    result.seconds, result.log = time.monotonic() - started, str(log)
    progress(f"{part.name}: {result.status} in {result.seconds:.0f} s"
             + (f": {result.detail}" if result.detail else ""))
    return result


def run_logged(command: list, env: dict, log: Path, timeout: int) -> int | None:
    """The exit code, or None when it ran past `timeout` (its whole process group is killed)."""
    with log.open("w") as out:
        out.write(f"$ {shlex.join(command)}\n")
        out.flush()
        try:
            proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as err:
            out.write(f"cannot start: {err}\n")
            return 127
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return None


def judge(part: Part, code: int | None, probe_: Probe, layout: Layout, timeout: int) -> Result:
    if code is None:
        return Result(part.name, "fail", f"timed out after {timeout} s (its budget)")
    if not part.junit:
        return Result(part.name, "pass" if code == 0 else "fail", "" if code == 0 else f"exited {code}")
    result = judge_pytest(part, code, probe_, layout.work / "junit" / f"{part.junit}.xml")
    if part.memcheck and result.status != "skipped":
        errors = memcheck_errors(layout.work / "logs" / f"{part.name}.log")
        result.numbers["memcheck_errors"] = errors
        if errors:
            result.status = "fail"
            result.detail = f"compute-sanitizer memcheck: {errors} errors (check.log); {result.detail}"
        else:
            result.detail = f"memcheck: 0 errors; {result.detail}"
    return result


def memcheck_errors(log: Path) -> int:
    """The errors compute-sanitizer's `ERROR SUMMARY: N errors` lines add up to."""
    text = log.read_text(errors="replace") if log.is_file() else ""
    return sum(int(n) for n in re.findall(r"ERROR SUMMARY: (\d+) error", text))


def junit_counts(path: Path) -> dict:
    """tests, failures (errors included), skipped, cuda_passed and the skip messages."""
    counts = {"tests": 0, "failures": 0, "skipped": 0, "cuda_passed": 0, "skips": []}
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return counts
    for case in root.iter("testcase"):
        counts["tests"] += 1
        outcome = {child.tag: child for child in case}
        if "failure" in outcome or "error" in outcome:
            counts["failures"] += 1
        elif "skipped" in outcome:
            counts["skipped"] += 1
            counts["skips"].append(outcome["skipped"].get("message", ""))
        elif "cuda" in case.get("name", "").lower():
            counts["cuda_passed"] += 1
    return counts


def judge_pytest(part: Part, code: int, probe_: Probe, junit: Path) -> Result:
    counts = junit_counts(junit)
    numbers = {k: v for k, v in counts.items() if k != "skips"}
    summary = f"{counts['tests']} tests, {counts['failures']} failed, {counts['skipped']} skipped"
    if code == 5:
        if part.none_selected:
            return Result(part.name, "skipped", part.none_selected, numbers=numbers)
        return Result(part.name, "fail", "pytest selected no test", numbers=numbers)
    if code != 0:
        return Result(part.name, "fail", f"pytest exited {code}: {summary}", numbers=numbers)
    stray = [m for m in counts["skips"] if NO_GPU_SKIP.search(m)]
    if probe_.gpu and stray:
        return Result(part.name, "fail", f"{summary}; {len(stray)} skipped for 'no GPU' although "
                      f"torch sees {probe_.gpu}: {stray[0][:200]}", numbers=numbers)
    if probe_.gpu and part.needs_cuda_tests and not counts["cuda_passed"]:
        return Result(part.name, "fail", f"{summary}; no CUDA test passed", numbers=numbers)
    return Result(part.name, "pass", summary, numbers=numbers)


# --------------------------------------------------------------------------------------- report

def bench_targets(results: list, layout: Layout) -> tuple:
    """(targets, bench data or None): the bench's own, else every target skipped with the
    reason the bench did not run."""
    gpu_report = bench_report()
    bench = next(r for r in results if r.name == "bench")
    path = layout.bench / "bench.json"
    if bench.status == "pass" and path.is_file():
        data = json.loads(path.read_text())
        return data["targets"], data
    why = bench.detail if bench.status == "skipped" else f"the bench failed ({bench.detail})"
    return gpu_report.skipped_targets(gpu_report.spec_ops(), why), None


def overall(results: list) -> str:
    if any(r.status == "fail" for r in results):
        return "fail"
    return "pass" if any(r.status == "pass" for r in results) else "skipped"


def report_json(p: Probe, parts: list, results: list, targets: list) -> dict:
    return {"status": overall(results), "machine": dataclasses.asdict(p),
            "parts": [{**dataclasses.asdict(r), "what": part.what, "command": list(part.command)}
                      for part, r in zip(parts, results)],
            "targets": targets}


def report_markdown(p: Probe, parts: list, results: list, targets: list, bench) -> str:
    gpu_report = bench_report()
    title = {"pass": "passed", "fail": "FAILED", "skipped": "nothing ran"}[overall(results)]
    carried = (f"- carried: {', '.join(p.carried_wheels) or 'no wheels'}; ORT headers "
               f"{p.ort_include or 'none'}")
    lines = [f"# opforge GPU check: {title}", "", f"- machine: {machine_line(p)}", carried, "",
             "## Parts", "", "| part | what | status | time | detail |", "|---|---|---|---|---|"]
    for part, r in zip(parts, results):
        status = f"skipped: {r.detail}" if r.status == "skipped" else f"**{r.status}**"
        detail = "" if r.status == "skipped" else r.detail
        lines.append(f"| {part.name} | {part.what} | {status} | {r.seconds:.0f} s | {detail} |")
    lines += ["", "## GPU bench targets", "", *gpu_report.target_table(targets), ""]
    if bench:
        lines += ["Tables, peers and plots: [bench/bench.md](bench/bench.md). Peers: "
                  + "; ".join(f"{k}: {v}" for k, v in bench["peers"].items()), ""]
    lines += ["Logs of every part: check.log.", ""]
    return "\n".join(lines)


def write_log(results: list, path: Path) -> None:
    with path.open("w") as out:
        for r in results:
            out.write(f"===== {r.name}: {r.status} {r.detail}\n")
            if r.log and Path(r.log).is_file():
                data = Path(r.log).read_bytes()
                if len(data) > LOG_TAIL_BYTES:
                    out.write(f"[... the first {len(data) - LOG_TAIL_BYTES} bytes left out]\n")
                out.write(data[-LOG_TAIL_BYTES:].decode("utf-8", "replace"))
            out.write("\n")


def write_report(p: Probe, parts: list, results: list, layout: Layout) -> list:
    targets, bench = bench_targets(results, layout)
    layout.out.mkdir(parents=True, exist_ok=True)
    (layout.out / "report.json").write_text(json.dumps(report_json(p, parts, results, targets),
                                                       indent=1))
    (layout.out / "report.md").write_text(report_markdown(p, parts, results, targets, bench))
    write_log(results, layout.out / "check.log")
    return sorted(str(f.relative_to(layout.out)) for f in layout.out.rglob("*") if f.is_file())


def check(layout: Layout, *, budget_s: float) -> int:
    started = time.monotonic()
    p = probe(layout.carried)
    progress(f"machine: {machine_line(p)}")
    parts = plan(p, layout)
    for folder in (layout.work, layout.bench):
        shutil.rmtree(folder, ignore_errors=True)
    results = execute(parts, layout, p, budget_s=budget_s - (time.monotonic() - started))
    files = write_report(p, parts, results, layout)
    status = overall(results)
    progress(f"{status}: wrote {', '.join(files)} in {layout.out}")
    return 1 if status == "fail" else 0


# -------------------------------------------------------------------------------------- prepare

def carried_requirements(tools: dict, ort_plugin_pyproject: str) -> list:
    """What --prepare downloads: Liger-Kernel at matrix.yaml's pin, and the scikit-build-core
    the ORT plugin's pyproject.toml builds with (its own pin: the machine may have another)."""
    import tomllib

    requires = tomllib.loads(ort_plugin_pyproject)["build-system"]["requires"]
    backend = next(r for r in requires if r.startswith("scikit-build-core"))
    return [f"liger-kernel=={tools['liger-kernel']}", backend]


def _matrix():
    """matrix.yaml through ci.matrix; in the bootstrap venv (re-executed there) when this
    python lacks what ci.matrix reads it with."""
    try:
        from ci import matrix as mx
    except ImportError:
        from ci import bootstrap

        python = bootstrap.ensure_venv(bootstrap.read_requirements(
            bootstrap.read_bytes(REPO / "matrix.yaml")))
        os.execv(str(python), [str(python), str(Path(__file__).resolve()), *sys.argv[1:]])
    return mx.load()


def prepare(dest: Path) -> int:
    from ci import debian

    matrix = _matrix()
    wanted = carried_requirements(matrix.tools, (REPO / "packages" / "ort_plugin" /
                                                 "pyproject.toml").read_text())
    wheels = dest / "wheels"
    shutil.rmtree(wheels, ignore_errors=True)
    wheels.mkdir(parents=True)
    done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                           "--disable-pip-version-check", "-q", "-d", str(wheels), *wanted])
    if done.returncode != 0:
        print(f"gpu-check --prepare: pip download {' '.join(wanted)} failed", file=sys.stderr)
        return 1
    include = dest / "ort-include"
    shutil.rmtree(include, ignore_errors=True)
    shutil.copytree(debian.ort_include_dir(matrix), include)
    size = sum(f.stat().st_size for f in dest.rglob("*") if f.is_file())
    (dest / "carried.json").write_text(json.dumps({"wheels": sorted(p.name for p in wheels.iterdir()),
                                                   "requirements": wanted, "ort_include": "ort-include",
                                                   "bytes": size}, indent=1))
    shown = dest.relative_to(REPO) if dest.is_relative_to(REPO) else dest
    print(f"gpu-check --prepare: {shown}: {', '.join(sorted(p.name for p in wheels.iterdir()))}, "
          f"ort-include/ ({size / 2**20:.1f} MiB); on the GPU machine: python3 ci/gpu_check.py "
          f"--carried {shown} OUT")
    return 0


# ----------------------------------------------------------------------------------------- main

def parse(argv):
    parser = argparse.ArgumentParser(prog="python3 ci/gpu_check.py", description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, help="the folder for report.md, report.json, ...")
    parser.add_argument("--carried", type=Path, default=DEFAULT_CARRIED,
                        help="what --prepare gathered (default build/gpu-carried)")
    parser.add_argument("--work", type=Path, default=DEFAULT_WORK,
                        help="builds and logs (default build/gpu-check; emptied first)")
    parser.add_argument("--budget", type=float, default=BUDGET_S, metavar="SECONDS")
    parser.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    parser.add_argument("--prepare", type=Path, metavar="DIR",
                        help="download what a GPU machine without network needs into DIR")
    args = parser.parse_args(argv)
    if not (args.out or args.dry_run or args.prepare):
        parser.error("give OUT, --dry-run or --prepare DIR")
    return args


def main(argv=None) -> int:
    args = parse(argv)
    if args.prepare:
        return prepare(args.prepare.resolve())
    layout = Layout(out=args.out.resolve() if args.out else Path("OUT"), work=args.work.resolve(),
                    carried=args.carried.resolve())
    if args.dry_run:
        p = probe(layout.carried)
        print(render_plan(p, plan(p, layout)))
        return 0
    if REPO.is_relative_to(layout.work) or layout.out.is_relative_to(layout.work):
        raise SystemExit(f"gpu-check: --work {layout.work} is emptied first: it must not hold the "
                         "repository or OUT")
    return check(layout, budget_s=args.budget)


if __name__ == "__main__":
    sys.exit(main())
