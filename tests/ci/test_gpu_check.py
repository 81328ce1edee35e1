"""ci/gpu_check.py's CPU side: the plan (what runs, what is skipped and why) from probes made up for
a GPU machine and for machines that lack a part; the execution of parts (real subprocesses: order,
blocking, budgets, pytest judging); the report; the real probe and the whole command here."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from ci import gpu_check as gc
from ci.gpucheck.carried import record
from ci.gpucheck.prepare import carried_requirements

CHECK = REPO / "ci" / "gpu_check.py"
SPEC_WHEEL = "opforge_spec-0.1.0-py3-none-any.whl"
H200 = gc.Probe(python="/opt/python3", cores=16, torch="2.11.0+cu130", torch_cuda="13.0",
                gpu="NVIDIA H200", capability="9.0", cuda_home="/opt/cuda", nvcc="13.0",
                sanitizer="/opt/cuda/bin/compute-sanitizer", pytest=True, xdist=True,
                onnxruntime="1.30.0", ort_cuda_ep=False, scikit_build_core="0.11.0",
                cuda_runtime_dir="/opt/nvidia/cu13/lib",
                carried_wheels=("liger_kernel-0.8.5-py3-none-any.whl", SPEC_WHEEL),
                ort_include="/carried/ort-include")
NO_GPU = dataclasses.replace(H200, gpu="", capability="", no_gpu="torch.cuda.is_available() is False")


def layout(tmp_path) -> gc.Layout:
    return gc.Layout(out=tmp_path / "out", work=tmp_path / "work", carried=tmp_path / "carried")


def parts_of(probe, tmp_path) -> dict:
    return {part.name: part for part in gc.plan(probe, layout(tmp_path))}


# ----------------------------------------------------------------------------------------- plan

def test_a_gpu_machine_builds_for_its_own_sm_and_runs_every_part_it_has_tools_for(tmp_path):
    parts = parts_of(H200, tmp_path)
    assert list(parts) == ["carried", "build-torch", "build-ort", "tests-torch", "tests-kernels",
                           "tests-ort-cuda", "sanitizer-torch", "sanitizer-kernels", "bench"]
    assert {n: p.skip for n, p in parts.items() if p.skip} == {
        "tests-ort-cuda": "onnxruntime 1.30.0 has no CUDAExecutionProvider (a CPU build): the "
                          "plugin's CUDA kernels need onnxruntime-gpu"}
    build = parts["build-torch"]
    assert dict(build.env)["OPFORGE_CUDA_ARCHS"] == "9.0" and dict(build.env)["MAX_JOBS"] == "16"
    assert {"--no-build-isolation", "--no-deps", "--no-index", "--target"} <= set(build.command)
    assert build.command[-1] == str(REPO / "packages" / "torch_ext")
    assert dict(parts["build-ort"].env)["OPFORGE_ORT_INCLUDE_DIR"] == "/carried/ort-include"
    assert dict(parts["tests-torch"].env)["OPFORGE_REQUIRE_GPU"] == "1"
    assert parts["tests-torch"].after == ("build-torch",) and parts["tests-torch"].needs_cuda_tests


def test_the_sanitizer_runs_the_small_cuda_cases_without_the_caching_allocator(tmp_path):
    part = parts_of(H200, tmp_path)["sanitizer-torch"]
    assert part.command[:3] == ("/opt/cuda/bin/compute-sanitizer", "--tool", "memcheck")
    assert "--error-exitcode" in part.command and "cuda or gpu" in part.command
    assert dict(part.env)["PYTORCH_NO_CUDA_MEMORY_CACHING"] == "1"


def test_the_bench_runs_the_quick_set_into_out_bench_within_the_time_left(tmp_path):
    part = parts_of(H200, tmp_path)["bench"]
    assert part.command[2:] == ("--device", "cuda", "--quick", "--out", str(tmp_path / "out" / "bench"),
                                "--time-limit", "{time_limit}")


def test_without_a_gpu_every_part_is_skipped_for_no_gpu(tmp_path):
    assert {p.skip for p in parts_of(NO_GPU, tmp_path).values()} == {"no GPU"}
    assert "skipped: no GPU" in gc.render_plan(NO_GPU, gc.plan(NO_GPU, layout(tmp_path)))


@pytest.mark.parametrize("change,part,reason", [
    ({"sanitizer": ""}, "sanitizer-torch", "compute-sanitizer not found"),
    ({"ort_include": ""}, "build-ort", "no ONNX Runtime C headers (--prepare DIR"),
    ({"scikit_build_core": ""}, "build-ort", "scikit-build-core is not installed and no wheel"),
    ({"nvcc": "12.4"}, "build-torch", "nvcc 12.4, but torch is built for CUDA 13.0"),
    ({"cuda_home": "", "nvcc": ""}, "build-ort", "no nvcc"),
    ({"pytest": False}, "tests-kernels", "pytest is not installed"),
    ({"carried_wheels": ()}, "carried", "no wheels in"),
    ({"carried_wheels": ("liger_kernel-0.8.5-py3-none-any.whl",)}, "build-ort", "no opforge-spec wheel"),
    ({"onnxruntime": ""}, "tests-ort-cuda", "onnxruntime is not installed"),
])
def test_a_missing_tool_skips_its_parts_naming_it(tmp_path, change, part, reason):
    assert parts_of(dataclasses.replace(H200, **change), tmp_path)[part].skip.startswith(reason)


def test_the_ort_cuda_tests_and_a_carried_build_backend_are_planned_when_there(tmp_path):
    probe = dataclasses.replace(H200, ort_cuda_ep=True, scikit_build_core="",
                                carried_wheels=("scikit_build_core-1.1.2-py3-none-any.whl", SPEC_WHEEL))
    parts = parts_of(probe, tmp_path)
    assert parts["tests-ort-cuda"].skip == "" and parts["tests-ort-cuda"].after == ("build-ort",)
    assert parts["build-ort"].after == ("carried",)
    assert dict(parts_of(dataclasses.replace(H200, capability="8.6"), tmp_path)["build-ort"].env)[
        "OPFORGE_CUDA_ARCHS"] == "8.6"


# ------------------------------------------------------------------------------------ execution

def py(code: str) -> tuple:
    return (sys.executable, "-c", textwrap.dedent(code))


def test_groups_run_in_order_and_a_failure_blocks_what_needs_it(tmp_path):
    parts = [gc.Part("a", "fails", 0, 30, py("raise SystemExit(3)")),
             gc.Part("b", "needs a", 1, 30, py("pass"), after=("a",)),
             gc.Part("c", "independent", 1, 30, py("print('ran c')"))]
    results = {r.name: r for r in gc.execute(parts, layout(tmp_path), H200, budget_s=120)}
    assert (results["a"].status, results["a"].detail) == ("fail", "exited 3")
    assert (results["b"].status, results["b"].detail) == ("skipped", "a failed")
    assert results["c"].status == "pass" and "ran c" in Path(results["c"].log).read_text()
    assert gc.overall(list(results.values())) == "fail"


def test_a_part_past_its_budget_is_killed_with_its_children_and_fails(tmp_path):
    marker = tmp_path / "child-survived"
    child = f"import time; time.sleep(2); open({str(marker)!r}, 'w')"
    part = gc.Part("slow", "sleeps", 0, 1, py(f"""
        import subprocess, sys, time
        subprocess.Popen([sys.executable, "-c", {child!r}])
        time.sleep(60)"""))
    started = time.monotonic()
    result = gc.run_part(part, 1, layout(tmp_path), H200)
    assert (result.status, result.detail) == ("fail", "timed out after 1 s (its budget)")
    assert time.monotonic() - started < 10
    time.sleep(2.5)
    assert not marker.exists()


def test_parts_that_would_start_past_the_budget_are_skipped(tmp_path):
    parts = [gc.Part("late", "any", 0, 30, py("pass"))]
    (result,) = gc.execute(parts, layout(tmp_path), H200, budget_s=gc.REPORT_RESERVE_S + 1)
    assert result.status == "skipped" and "budget was spent" in result.detail


def pytest_part(tmp_path, body: str, **kw) -> gc.Part:
    test = tmp_path / "test_sample.py"
    test.write_text(textwrap.dedent(body))
    junit = tmp_path / "work" / "junit" / "sample.xml"
    return gc.Part("sample", "pytest", 0, 60, (sys.executable, "-m", "pytest", "-q", "-p",
                                                "no:cacheprovider", f"--junitxml={junit}", str(test)),
                   junit="sample", **kw)


NO_GPU_SKIP = """
    import pytest

    def test_cuda_add():
        assert 1 + 1 == 2

    def test_on_gpu():
        pytest.skip("no GPU: CUDA kernels are compiled here but can only run on a GPU machine")
"""


def test_a_no_gpu_skip_fails_the_tests_on_a_gpu_machine_only(tmp_path):
    part = pytest_part(tmp_path, NO_GPU_SKIP)
    on_gpu = gc.run_part(part, 60, layout(tmp_path), H200)
    assert on_gpu.status == "fail" and "1 skipped for 'no GPU' although torch sees NVIDIA H200" in on_gpu.detail
    here = gc.run_part(part, 60, layout(tmp_path), NO_GPU)
    assert (here.status, here.detail) == ("pass", "2 tests, 0 failed, 1 skipped")
    assert here.numbers["cuda_passed"] == 1


def test_tests_that_need_cuda_fail_when_no_cuda_test_passed(tmp_path):
    part = pytest_part(tmp_path, "def test_cpu_only():\n    pass\n", needs_cuda_tests=True)
    result = gc.run_part(part, 60, layout(tmp_path), H200)
    assert result.status == "fail" and result.detail.endswith("no CUDA test passed")


def test_a_failing_test_fails_and_no_selected_test_is_a_skip_only_where_allowed(tmp_path):
    failing = gc.run_part(pytest_part(tmp_path, "def test_x():\n    assert False\n"), 60,
                          layout(tmp_path), NO_GPU)
    assert failing.status == "fail" and failing.detail == "pytest exited 1: 1 tests, 1 failed, 0 skipped"
    empty = pytest_part(tmp_path, "X = 1\n", none_selected="nothing named *gpu* yet")
    result = gc.run_part(empty, 60, layout(tmp_path), NO_GPU)
    assert (result.status, result.detail) == ("skipped", "nothing named *gpu* yet")
    assert gc.run_part(dataclasses.replace(empty, none_selected=""), 60, layout(tmp_path),
                       NO_GPU).status == "fail"


def test_memcheck_errors_fail_a_sanitized_part_even_when_its_tests_passed(tmp_path):
    part = dataclasses.replace(pytest_part(tmp_path, "def test_cuda_ok():\n    pass\n"),
                               memcheck=True)
    clean = gc.run_part(part, 60, layout(tmp_path), H200)
    assert clean.status == "pass" and clean.detail.startswith("memcheck: 0 errors")
    log = tmp_path / "work" / "logs" / "sample.log"
    log.write_text("========= Invalid __global__ write of size 4\n========= ERROR SUMMARY: 3 errors\n")
    result = gc.judge(part, 0, H200, layout(tmp_path), 60)
    assert result.status == "fail" and result.detail.startswith("compute-sanitizer memcheck: 3 errors")


# --------------------------------------------------------------------------------------- report

def test_the_report_without_a_gpu_says_skipped_for_every_part_and_target(tmp_path):
    where = layout(tmp_path)
    parts = gc.plan(NO_GPU, where)
    results = gc.execute(parts, where, NO_GPU, budget_s=60)
    files = gc.write_report(NO_GPU, parts, results, where)
    assert files == ["check.log", "report.json", "report.md"]
    data = json.loads((where.out / "report.json").read_text())
    assert data["status"] == "skipped" and {p["status"] for p in data["parts"]} == {"skipped"}
    assert {t["status"] for t in data["targets"]} == {"skipped: no GPU"}
    text = (where.out / "report.md").read_text()
    assert "# opforge GPU check: nothing ran" in text
    assert all(f"| {p.name} | {p.what} | skipped: no GPU |" in text for p in parts)
    assert "| Swish float32 forward >= 85% of D2D copy bandwidth | 0.85x | - | **skipped: no GPU** |" in text


def test_the_report_takes_the_bench_targets_when_the_bench_ran(tmp_path):
    where = layout(tmp_path)
    where.bench.mkdir(parents=True)
    target = {"id": "Swish.float32.fwd.copy", "target": "Swish float32 forward >= 85% of D2D copy",
              "bar": 0.85, "ratio": 0.91, "status": "met", "detail": "3900 GB/s vs copy 4300 GB/s"}
    (where.bench / "bench.json").write_text(json.dumps({"targets": [target],
                                                        "peers": {"Liger-Kernel": "measured"}}))
    parts = [gc.Part("bench", "the bench", 0, 60)]
    results = [gc.Result("bench", "pass", seconds=42.0)]
    gc.write_report(H200, parts, results, where)
    text = (where.out / "report.md").read_text()
    assert "# opforge GPU check: passed" in text and "| 0.91x | **met** |" in text
    assert "Peers: Liger-Kernel: measured" in text


def test_a_failed_bench_skips_its_targets_naming_the_failure(tmp_path):
    results = [gc.Result("bench", "fail", "exited 1")]
    targets, bench, unlisted = gc.bench_targets(results, layout(tmp_path))
    assert bench is None and unlisted == "" and targets[0]["status"] == "skipped: the bench failed (exited 1)"


def test_the_target_table_is_the_one_the_bench_report_writes():
    from ci.gpucheck.common import bench_report

    rows = [{"id": "a", "target": "Swish float32 forward >= 85% of D2D copy", "bar": 0.85,
             "ratio": 0.91, "status": "met", "detail": "3900 GB/s vs copy 4300 GB/s"},
            {"id": "b", "target": "RMSNorm bfloat16 forward >= Liger", "bar": 1.0,
             "status": "skipped: no GPU"}]
    assert gc.target_table(rows) == bench_report().target_table(rows)


def test_the_log_keeps_the_tail_of_each_part_and_out_stays_within_the_device_limits(tmp_path):
    where = layout(tmp_path)
    big = tmp_path / "big.log"
    big.write_text("x" * (gc.LOG_TAIL_BYTES + 1000) + "THE END")
    results = [gc.Result(f"p{i}", "fail", "exited 1", log=str(big)) for i in range(9)]
    where.out.mkdir(parents=True)
    gc.write_log(results, where.out / "check.log")
    text = (where.out / "check.log").read_text()
    assert text.count("THE END") == 9 and "[... the first 1007 bytes left out]" in text
    assert (where.out / "check.log").stat().st_size < 16 << 20


# ------------------------------------------------------------------------- the real probe, here

def test_the_real_probe_reports_this_machine(tmp_path):
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "liger_kernel-0.8.5-py3-none-any.whl").write_bytes(b"")
    record(tmp_path, ["liger-kernel==0.8.5"])
    probe = gc.probe(tmp_path)
    torch = pytest.importorskip("torch")
    assert bool(probe.gpu) == torch.cuda.is_available()
    assert (probe.no_gpu == "") == bool(probe.gpu) and probe.torch == torch.__version__
    assert probe.carried_wheels == ("liger_kernel-0.8.5-py3-none-any.whl",) and probe.cores >= 1
    assert bool(probe.nvcc) == bool(probe.cuda_home) and probe.pytest


def test_the_check_plans_and_ends_quickly_here_with_every_gpu_part_skipped(tmp_path):
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_available():
        pytest.skip("a GPU is here: the check itself builds, tests and benches (minutes)")
    dry = subprocess.run([sys.executable, str(CHECK), "--dry-run", "--work", str(tmp_path / "w")],
                         capture_output=True, text=True, timeout=120)
    assert dry.returncode == 0, dry.stderr
    assert all(name in dry.stdout for name in ("build-torch", "sanitizer-torch", "bench"))
    assert not (tmp_path / "w").exists()
    started = time.monotonic()
    done = subprocess.run([sys.executable, str(CHECK), str(tmp_path / "out"), "--work",
                           str(tmp_path / "work"), "--carried", str(tmp_path / "carried")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert time.monotonic() - started < 60
    assert done.stdout.count(": skipped: no GPU") == len(gc.plan(NO_GPU, layout(tmp_path)))
    data = json.loads((tmp_path / "out" / "report.json").read_text())
    assert {(p["status"], p["detail"]) for p in data["parts"]} == {("skipped", "no GPU")}


def test_prepare_downloads_the_matrix_pin_of_liger_and_the_plugin_build_backend():
    pyproject = (REPO / "packages" / "ort_plugin" / "pyproject.toml").read_text()
    wanted = carried_requirements({"liger-kernel": "9.9.9"}, pyproject)
    assert wanted[0] == "liger-kernel==9.9.9"
    assert wanted[1].startswith("scikit-build-core==") and wanted[1] in pyproject
