"""The harness can fail: deliberately wrong kernel outputs are reported as failures, with the
worst element, by the checks and by the stage scripts (exit code, stage result)."""
import json
import os
import subprocess

import numpy as np
import pytest
from _package import COMMAND

from opforge_align.harness import layer1, ort_check
from opforge_align.harness.checks import spec


def test_sign_error_fails_layer1_and_names_the_worst_element():
    results = layer1.run(ops=[spec.SWISH], dtypes=["float32"], fault="sign")
    failed = {(c.subject, c.against) for c in results.failed}
    assert ("opforge_torch.cpu", "reference") in failed
    assert ("opforge_torch.cpu", "torch_composed.cpu") in failed
    detail = next(c.detail for c in results.failed if c.case == "random")
    assert "worst element at index" in detail and "input 0 there" in detail


def test_one_ulp_error_fails_the_bitwise_torch_ort_check(export_dir, ort_library, tmp_path):
    results = ort_check.check_folder(export_dir, tmp_path, library=ort_library, fault="ulp",
                                     refeval=False)
    bitwise = [c for c in results.failed if c.rule == "bitwise equal"]
    assert bitwise, "a 1-ulp error in the ORT outputs went unnoticed"
    assert {c.subject for c in bitwise} == {"ort.custom-ts", "ort.custom-dynamo"}
    assert all(c.max_ulp >= 1 for c in bitwise)


def test_stage_script_exits_nonzero_and_records_the_failure(export_dir, ort_library, tmp_path):
    stage = tmp_path / "result.json"
    env = {**os.environ, "OPFORGE_STAGE_RESULT": str(stage)}
    proc = subprocess.run([*COMMAND, "layer2", "--models", str(export_dir),
                           "--out", str(tmp_path / "out"), "--no-refeval", "--inject-fault", "sign"],
                          env=env, capture_output=True, text=True)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAIL layer 2 ort.custom-ts vs reference" in proc.stderr
    numbers = json.loads(stage.read_text())["numbers"]
    assert numbers["align.failed"] > 0
    assert numbers["align.l2.Swish.float32.ort.custom-ts.vs_reference.pass"] == 0


def test_layer3_never_reports_a_pass_without_tensorrt(export_dir, tmp_path):
    """Layer 3 is `opforge-align run EXPORT --runtimes ort,trt`: without TensorRT, one line and
    exit 2 - never a pass, never a traceback."""
    from opforge_align.trt import unavailable

    if unavailable() is None:
        pytest.skip("TensorRT and a GPU are here: layer 3 runs for real")
    proc = subprocess.run([*COMMAND, "run", str(export_dir), "--runtimes", "ort,trt", "--json",
                           str(tmp_path / "trt.json")], capture_output=True, text=True)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and "TensorRT unavailable" in proc.stderr, proc.stderr
    assert not (tmp_path / "trt.json").exists()


@pytest.mark.parametrize("mutation", ["none", "ulp", "sign"])
def test_a_mutated_copy_of_the_kernel_is_caught(mutation, tmp_path):
    """The shared Swish kernel compiled from a copy of the headers, unchanged or with a planted
    error, against opforge_torch (which must run exactly this kernel: bitwise) and the reference."""
    import shutil as sh

    import kernel_shim
    import torch

    from opforge_align.harness.checks import against_reference, same_bits
    from opforge_align.harness.layer1 import opforge_call

    if not sh.which("g++"):
        pytest.skip("no g++ to compile the kernel shim")
    lib = kernel_shim.build(tmp_path, mutation)
    outcomes = []
    for case in spec.SWISH.cases("float32"):
        beta = float(np.float32(case.attrs.get("beta", 1.0)))
        got = kernel_shim.swish(lib, case.inputs[0], beta)
        torch_y = opforge_call(spec.SWISH)(torch.from_numpy(np.array(case.inputs[0])), beta).numpy()
        outcomes.append((same_bits(spec.SWISH, got, torch_y, case.inputs, "float32", layer="1",
                                   subject="kernel", against="opforge_torch", case=case.name),
                         against_reference(spec.SWISH, got, case.inputs, case.attrs, "float32",
                                           layer="1", subject="kernel", case=case.name)))
    bitwise_ok = all(b.passed for b, _ in outcomes)
    reference_ok = all(r.passed for _, r in outcomes)
    if mutation == "none":
        assert bitwise_ok and reference_ok, [b.detail or r.detail for b, r in outcomes
                                             if not (b.passed and r.passed)]
    elif mutation == "ulp":
        assert not bitwise_ok and reference_ok  # 1 ulp is inside the tolerance: only bits see it
    else:
        assert not bitwise_ok and not reference_ok
