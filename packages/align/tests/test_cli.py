"""The tool as users run it (`python -m opforge_align` = `opforge-align`), on models built here:
the issue's acceptance checks, the exit codes and the report files."""
import json

import numpy as np
import pytest
from models import mixed, tensors_by_name
from onnx import TensorProto


@pytest.fixture
def model(tmp_path, ort_library):
    path = tmp_path / "m.onnx"
    return path, mixed(path)


def test_mixed_model_all_tensors_agree_with_the_float64_reference(model, tmp_path, align):
    path, tensors = model
    proc = align("run", path, "--runtimes", "ort,reference", "--all-tensors", "--json",
                 tmp_path / "r.json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["first_divergence"] is None and report["ok"] is True
    # every intermediate, in topological order
    assert [t["name"] for t in report["tensors"]] == tensors
    swish = tensors_by_name(report)["/l1/swish"]
    assert swish["op"] == "opforge::Swish" and swish["node"] == "l1_swish"
    assert swish["rule"].startswith("opforge::Swish spec float32")
    for key in ("max_abs", "max_rel", "max_ulp", "p99_ulp", "worst", "ok"):
        assert key in swish


def test_a_perturbed_stored_tensor_is_the_first_divergence(model, tmp_path, align):
    path, _ = model
    golden, perturbed = tmp_path / "golden.npz", tmp_path / "perturbed.npz"
    saved = align("run", path, "--runtimes", "ort,reference", "--all-tensors",
                  "--save-outputs", golden)
    assert saved.returncode == 0, saved.stdout + saved.stderr
    data = dict(np.load(golden))
    data["/l1/norm"] = data["/l1/norm"] * np.float32(1.001)  # 0.1 %
    np.savez(perturbed, **data)
    same = align("run", path, "--runtimes", "ort", "--load-outputs", golden)
    assert same.returncode == 0, same.stdout + same.stderr
    proc = align("run", path, "--runtimes", "ort", "--all-tensors", "--load-outputs", perturbed,
                 "--json", tmp_path / "r.json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    first = json.loads((tmp_path / "r.json").read_text())["first_divergence"]
    assert first == {"tensor": "/l1/norm", "node": "l1_norm", "op": "opforge::RMSNorm", "output": "",
                     "subject": "ort", "baseline": "stored"}


def test_a_tolerance_override_accepts_the_perturbation(model, tmp_path, align):
    path, _ = model
    golden = tmp_path / "golden.npz"
    align("run", path, "--runtimes", "ort,reference", "--all-tensors", "--save-outputs", golden)
    data = dict(np.load(golden))
    data["/l1/mm"] = data["/l1/mm"] * np.float32(1.001)
    np.savez(golden, **data)
    proc = align("run", path, "--runtimes", "ort", "--load-outputs", golden,
                 "--tolerance", "/l1/m*=0.01,0")
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("content", [b"", b"\x08\x07 not a model \xff\xff\xff"], ids=["empty", "garbage"])
def test_a_corrupt_model_exits_2_with_one_line_naming_it(tmp_path, align, content):
    path = tmp_path / "corrupt.onnx"
    path.write_bytes(content)
    proc = align("run", path)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and str(path) in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not proc.stdout


def test_tensorrt_here_says_unavailable(model, align):
    from opforge_align.trt import unavailable

    if unavailable() is None:
        pytest.skip("TensorRT and a GPU are here")
    path, _ = model
    proc = align("run", path, "--runtimes", "trt")
    assert proc.returncode == 2
    assert proc.stderr.startswith("opforge-align: TensorRT unavailable: ") and \
        proc.stderr.count("\n") == 1, proc.stderr


def test_an_unavailable_runtime_can_be_skipped_and_is_reported(model, tmp_path, align):
    from opforge_align.trt import unavailable

    if unavailable() is None:
        pytest.skip("TensorRT and a GPU are here")
    path, _ = model
    proc = align("run", path, "--runtimes", "ort,reference,trt", "--skip-unavailable", "--json",
                 tmp_path / "r.json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    skipped = json.loads((tmp_path / "r.json").read_text())["skipped_runtimes"]
    assert skipped["trt"].startswith("TensorRT unavailable")


@pytest.mark.parametrize("args, says", [
    (["--runtimes", "ort,onnx"], "--runtimes"),
    (["--tolerance", "y=abc"], "--tolerance"),
    (["--runtimes", "ort"], "nothing to compare"),
    (["--inputs", "missing.npz"], "missing.npz"),
])
def test_usage_errors_exit_2_with_one_line(model, align, args, says, tmp_path):
    path, _ = model
    proc = align("run", path, *args, cwd=tmp_path)
    assert proc.returncode == 2 and says in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr


def test_wrong_opforge_domain_version_is_refused(tmp_path, align):
    path = tmp_path / "v2.onnx"
    mixed(path, opforge_version=2)
    proc = align("run", path)
    assert proc.returncode == 2 and "opforge: expected version 1, got 2" in proc.stderr


def test_inputs_npz_feeds_the_run_and_a_bad_shape_is_named(model, tmp_path, align):
    path, _ = model
    good, bad = tmp_path / "good.npz", tmp_path / "bad.npz"
    np.savez(good, x=np.ones((3, 16), np.float32))
    np.savez(bad, x=np.ones((3, 15), np.float32))
    ok = align("run", path, "--inputs", good, "--json", tmp_path / "r.json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads((tmp_path / "r.json").read_text())["inputs"]["x"]["shape"] == [3, 16]
    refused = align("run", path, "--inputs", bad)
    assert refused.returncode == 2 and "input 'x': expected shape ['?', 16], got [3, 15]" in refused.stderr


def test_report_md_has_a_table_and_a_plot_per_diverging_tensor(model, tmp_path, align):
    pytest.importorskip("matplotlib")
    path, _ = model
    golden = tmp_path / "golden.npz"
    align("run", path, "--all-tensors", "--save-outputs", golden)
    data = dict(np.load(golden))
    data["/l1/tanh"] = -data["/l1/tanh"]
    np.savez(golden, **data)
    proc = align("run", path, "--runtimes", "ort", "--load-outputs", golden, "--report",
                 tmp_path / "rep")
    assert proc.returncode == 1
    text = (tmp_path / "rep" / "report.md").read_text()
    assert "| `/l1/tanh` | Tanh | ort |" in text and "**NO**" in text and "MISMATCH" in text
    assert [p.name for p in (tmp_path / "rep").glob("*.png")] == ["error__l1_tanh_ort.png"]


def test_float16_model_is_judged_against_float64(tmp_path, align):
    """opforge_ort's CPU kernels take no float16: standard ops only (ORT runs them in float16)."""
    path = tmp_path / "m16.onnx"
    mixed(path, dtype=TensorProto.FLOAT16, opforge=False)
    proc = align("run", path, "--all-tensors", "--json", tmp_path / "r.json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["baseline"] == "reference"
    tensors = tensors_by_name(report)
    assert {t["dtype"] for t in tensors.values()} == {"float16"}
    assert tensors["/l1/mm"]["rule"] == "default float16"
    assert 0 < tensors["y"]["max_ulp"] < 64  # a float16 result: float64's error would be ~0


def test_a_runtime_refusing_the_model_exits_2_naming_it(tmp_path, align, ort_library):
    path = tmp_path / "m16.onnx"
    mixed(path, dtype=TensorProto.FLOAT16)  # opforge_ort's CPU kernels take no float16
    proc = align("run", path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith(f"opforge-align: {path}: ort: ") and "float16" in proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr


def test_a_folder_runs_every_model_and_writes_the_stage_result(tmp_path, align, ort_library):
    from models import chain

    folder = tmp_path / "models"
    folder.mkdir()
    mixed(folder / "a.onnx")
    chain(folder / "b.onnx", 12)
    (folder / "c.onnx").write_bytes(b"corrupt")
    stage = tmp_path / "stage.json"
    import os
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "opforge_align", "run", str(folder), "--all-tensors",
                           "--json", str(tmp_path / "r.json")], capture_output=True, text=True,
                          env={**os.environ, "OPFORGE_STAGE_RESULT": str(stage)})
    assert proc.returncode == 1, proc.stdout + proc.stderr  # c.onnx cannot be read: a failed run
    runs = {r["label"]: r for r in json.loads((tmp_path / "r.json").read_text())["runs"]}
    assert runs["a"]["ok"] and runs["b"]["ok"] and len(runs["b"]["tensors"]) == 12
    assert "not a readable ONNX model" in runs["c"]["error"]
    numbers = json.loads(stage.read_text())["numbers"]
    assert numbers["align.runs"] == 3 and numbers["align.failed"] == 1 and numbers["align.a.pass"] == 1
    only = align("run", folder, "--match", "[ab]")
    assert only.returncode == 0, only.stdout + only.stderr


def test_an_export_folder_runs_each_model_on_each_case(tmp_path, align, ort_library):
    """The layout `opforge-align export` writes: manifest.json, models/, data/ (in0, in1, ...)."""
    (tmp_path / "models").mkdir()
    (tmp_path / "data").mkdir()
    mixed(tmp_path / "models" / "m.custom.onnx")
    cases = []
    for name, rows in (("small", 1), ("big", 5)):
        np.savez(tmp_path / "data" / f"{name}.npz", in0=np.ones((rows, 16), np.float32) * 0.5)
        cases.append({"name": name, "data": f"data/{name}.npz"})
    manifest = {"entries": [{"id": "m.float32", "models": {"custom": "models/m.custom.onnx",
                                                           "other": {"skipped": "not here"}},
                             "cases": cases}]}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    proc = align("run", tmp_path, "--json", tmp_path / "r.json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runs = json.loads((tmp_path / "r.json").read_text())["runs"]
    assert [r["label"] for r in runs] == ["m.float32.custom.small", "m.float32.custom.big"]
    assert [r["inputs"]["x"]["shape"] for r in runs] == [[1, 16], [5, 16]]


def test_ort_cuda_that_falls_back_to_the_cpu_is_an_error_not_a_result(model, monkeypatch):
    """onnxruntime-gpu without its CUDA libraries quietly runs on the CPU EP: `ort-cuda` results
    would then be CPU results under a CUDA label."""
    import onnxruntime

    from opforge_align import errors, runtimes
    from opforge_align import model as model_io

    path, _ = model

    class FellBack(onnxruntime.InferenceSession):
        def __init__(self, proto, options, providers):
            super().__init__(proto, options, providers=["CPUExecutionProvider"])

    monkeypatch.setattr(onnxruntime, "InferenceSession", FellBack)
    loaded = model_io.load(path)
    with pytest.raises(errors.AlignError, match=r"the CUDA execution provider did not load .*"
                                                r"fell back to CPUExecutionProvider"):
        runtimes.run_ort(loaded, loaded.proto, {}, [], libraries=runtimes.ort_libraries(loaded),
                         providers=["CUDAExecutionProvider", "CPUExecutionProvider"], label="ort-cuda")
