"""The `torch` runtime: a torch.export program (.pt2) beside the ONNX model exported from the same
module, with opforge_torch's ops in both; compared by the tool as users run it."""
import copy
import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="the torch runtime needs torch")
opforge_torch = pytest.importorskip("opforge_torch", reason="the test models call opforge_torch")
opforge_onnx = pytest.importorskip("opforge_torch.onnx")

BATCH, WIDTH = 2, 16


class Block(torch.nn.Module):
    """Linear -> opforge swish -> opforge rms_norm -> Linear."""

    def __init__(self, width=WIDTH, out=8):
        super().__init__()
        torch.manual_seed(0)
        self.proj = torch.nn.Linear(width, width)
        self.weight = torch.nn.Parameter(torch.rand(width) + 0.5)
        self.head = torch.nn.Linear(width, out)

    def forward(self, x):
        return self.head(opforge_torch.rms_norm(opforge_torch.swish(self.proj(x), 1.5),
                                                self.weight, 1e-5))


class TwoOutputs(Block):
    def forward(self, x):
        y = super().forward(x)
        return y, y * 2


def _save_program(module, path):
    x = torch.randn(BATCH, WIDTH, generator=torch.Generator().manual_seed(1))
    program = torch.export.export(module.eval(), (x,))
    torch.export.save(program, str(path))
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """block.onnx (dynamic batch) and the programs: the same module, its weights perturbed by
    1 %, a module of another output width, one with two outputs."""
    folder = tmp_path_factory.mktemp("torch_runtime")
    block = Block().eval()
    x = torch.randn(BATCH, WIDTH, generator=torch.Generator().manual_seed(1))
    opforge_onnx.export(block, (x,), str(folder / "block.onnx"),
                        dynamo=False, opset_version=17, input_names=["x"], output_names=["y"],
                        dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    perturbed = copy.deepcopy(block)
    with torch.no_grad():
        perturbed.weight.mul_(1.01)
    return {"onnx": folder / "block.onnx",
            "same": _save_program(block, folder / "block.pt2"),
            "perturbed": _save_program(perturbed, folder / "perturbed.pt2"),
            "narrow": _save_program(Block(out=4), folder / "narrow.pt2"),
            "two": _save_program(TwoOutputs(), folder / "two.pt2")}


@pytest.fixture
def run_here(capfd):
    """The CLI in this process (torch is imported once, not per test; a child process takes
    seconds to import it); stdout and stderr captured at the file descriptors, so anything torch
    writes there counts too."""
    from opforge_align.cli import main

    def run(*args):
        capfd.readouterr()
        code = main([str(a) for a in args])
        out, err = capfd.readouterr()
        return subprocess.CompletedProcess(args, code, out, err)
    return run


def _one_line_exit_2(proc, *needles):
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    for needle in needles:
        assert str(needle) in proc.stderr, proc.stderr


@pytest.mark.parametrize("runtimes, baseline, subjects", [
    ("torch,ort", "torch", ["ort"]),
    ("torch,reference", "reference", ["torch"]),
])
def test_the_program_agrees_with_the_onnx_model(files, tmp_path, align, ort_library, runtimes,
                                                baseline, subjects):
    proc = align("run", files["onnx"], "--runtimes", runtimes, "--exported-program",
                 files["same"], "--json", tmp_path / "r.json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert (report["baseline"], report["subjects"]) == (baseline, subjects)
    (y,) = report["tensors"]
    assert y["name"] == "y" and y["ok"] is True
    assert y["shape"] == [BATCH, 8] and report["notes"] == []


def test_perturbed_weights_diverge_on_the_output(files, tmp_path, run_here):
    proc = run_here("run", files["onnx"], "--runtimes", "torch,reference", "--exported-program",
                 files["perturbed"], "--json", tmp_path / "r.json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    first = report["first_divergence"]
    assert (first["tensor"], first["subject"], first["baseline"]) == ("y", "torch", "reference")
    assert "first divergence: 'y'" in proc.stdout


def test_all_tensors_with_torch_compares_graph_outputs_and_says_so(files, tmp_path, run_here,
                                                                   ort_library):
    proc = run_here("run", files["onnx"], "--runtimes", "torch,ort,reference", "--all-tensors",
                 "--exported-program", files["same"], "--json", tmp_path / "r.json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert [t["name"] for t in report["tensors"]] == ["y"] and report["all_tensors"] is False
    assert len(report["notes"]) == 1 and "graph outputs only" in report["notes"][0]
    assert proc.stdout.count("note: torch:") == 1


def test_a_golden_file_of_every_tensor_is_compared_on_the_outputs_with_torch(files, tmp_path,
                                                                             run_here, ort_library):
    golden = tmp_path / "golden.npz"
    saved = run_here("run", files["onnx"], "--runtimes", "ort,reference", "--all-tensors",
                     "--save-outputs", golden)
    assert saved.returncode == 0, saved.stdout + saved.stderr
    proc = run_here("run", files["onnx"], "--runtimes", "torch", "--load-outputs", golden,
                    "--exported-program", files["same"], "--json", tmp_path / "r.json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert [t["name"] for t in report["tensors"]] == ["y"] and report["baseline"] == "stored"
    assert len(report["notes"]) == 1 and "--all-tensors" not in report["notes"][0]


@pytest.mark.parametrize("content, says", [
    (None, ": no such file"), (b"", ": not a loadable torch.export program ("),
    (b"PK\x03\x04 not an archive", ": not a loadable torch.export program ("),
    ("truncated", ": not a loadable torch.export program (")],
    ids=["missing", "empty", "garbage", "truncated"])
def test_a_missing_or_corrupt_program_exits_2_with_one_line(files, tmp_path, run_here, content,
                                                            says):
    program = tmp_path / "bad.pt2"
    if content == "truncated":
        content = files["same"].read_bytes()[:2000]
    if content is not None:
        program.write_bytes(content)
    proc = run_here("run", files["onnx"], "--runtimes", "torch,reference", "--exported-program",
                 program)
    _one_line_exit_2(proc, f"opforge-align: {program}{says}")
    assert not proc.stdout


@pytest.mark.parametrize("program, says", [
    ("narrow", "output 0 has shape [2, 4], but"),
    ("two", "returns 2 output(s), but"),
])
def test_a_program_of_another_model_is_a_usage_error_naming_both(files, run_here, program, says):
    proc = run_here("run", files["onnx"], "--runtimes", "torch,reference", "--exported-program",
                 files[program])
    _one_line_exit_2(proc, files[program], files["onnx"], says)


def test_inputs_the_program_refuses_are_named(files, run_here):
    """The program was exported for batch 2; the ONNX model takes any batch."""
    proc = run_here("run", files["onnx"], "--runtimes", "torch,reference", "--dim", "batch=3",
                 "--exported-program", files["same"])
    _one_line_exit_2(proc, files["same"], files["onnx"], "refuses the inputs", "x float32[3, 16]")


def test_torch_without_a_program_is_unavailable(files, tmp_path, run_here, ort_library):
    proc = run_here("run", files["onnx"], "--runtimes", "torch,ort")
    _one_line_exit_2(proc, "opforge-align: torch runtime unavailable: ", "--exported-program")
    skipped = run_here("run", files["onnx"], "--runtimes", "ort,reference,torch",
                    "--skip-unavailable", "--json", tmp_path / "r.json")
    assert skipped.returncode == 0, skipped.stdout + skipped.stderr
    reason = json.loads((tmp_path / "r.json").read_text())["skipped_runtimes"]["torch"]
    assert reason.startswith("torch runtime unavailable")


@pytest.mark.parametrize("args, says", [
    (["--runtimes", "ort,reference"], "only the torch runtime runs it"),
    (["--runtimes", "torch,reference", "FOLDER"], "got the folder"),
])
def test_program_option_misuse_exits_2(files, run_here, args, says):
    model = files["onnx"].parent if "FOLDER" in args else files["onnx"]
    args = [a for a in args if a != "FOLDER"]
    proc = run_here("run", model, *args, "--exported-program", files["same"])
    _one_line_exit_2(proc, says)


def _without(module: str, *args) -> subprocess.CompletedProcess:
    """The CLI in a child process where `module` cannot be imported (as if not installed)."""
    code = (f"import sys; sys.modules[{module!r}] = None\n"
            "from opforge_align.cli import main\n"
            f"sys.exit(main({[str(a) for a in args]!r}))")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


def test_a_program_calling_opforge_ops_names_the_missing_opforge_torch(files):
    proc = _without("opforge_torch", "run", files["onnx"], "--runtimes", "torch,reference",
                    "--exported-program", files["same"])
    _one_line_exit_2(proc, files["same"], "torch.ops.opforge", "opforge_torch")


def test_torch_not_installed_is_unavailable(files):
    proc = _without("torch", "run", files["onnx"], "--runtimes", "torch,reference",
                    "--exported-program", files["same"])
    _one_line_exit_2(proc, "opforge-align: torch unavailable: import torch failed")
