"""An op of several inputs and outputs (AddRMSNorm: X, R, W -> Y, H) in a model whose residual
stream is chained (the first node's H is the second's residual): every output of every node
computed by the reference, compared tensor by tensor, and a divergence named by node and output."""
import json

import numpy as np
import onnx
import pytest
from models import residual_stream, tensors_by_name
from onnx import numpy_helper

import opforge_spec as spec
from opforge_align import reference
from opforge_align.model import load

BATCH, WIDTH = 3, 16


def _feeds(seed=0) -> dict:
    rng = np.random.default_rng(seed)
    return {name: rng.standard_normal((BATCH, WIDTH)).astype(np.float32) for name in ("x", "r")}


def _by_hand(path, feeds) -> dict:
    """The chain computed from the spec's float64 reference, node by node."""
    consts = {i.name: numpy_helper.to_array(i).astype(np.float64)
              for i in onnx.load(str(path)).graph.initializer}
    op = spec.ADD_RMS_NORM
    y1, h1 = op.reference(feeds["x"], feeds["r"], consts["g1"], epsilon=1e-5)
    y, h = op.reference(y1 @ consts["wm"], h1, consts["g2"])
    return {"/b1/y": y1, "/b1/h": h1, "y": y, "h": h}


def test_every_output_of_each_node_is_named_and_computed_by_the_reference(tmp_path):
    path = tmp_path / "stream.onnx"
    roles = residual_stream(path)
    model = load(path)
    assert {t.name: (t.node, t.output) for t in model.tensors if t.name in roles} == roles
    names = [t.name for t in model.tensors]
    feeds = _feeds()
    got = reference.run(model, model.with_outputs(names), feeds, names)
    for name, expected in _by_hand(path, feeds).items():
        # float64 on both sides, the same formulas in another order: a few steps of 2**-52
        np.testing.assert_allclose(got[name], expected, rtol=1e-12, atol=1e-12, err_msg=name)


def test_the_chained_stream_agrees_in_ort_output_by_output(tmp_path, align, ort_library):
    path = tmp_path / "stream.onnx"
    roles = residual_stream(path)
    proc = align("run", path, "--runtimes", "ort,reference", "--all-tensors", "--json",
                 tmp_path / "r.json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    tensors = tensors_by_name(json.loads((tmp_path / "r.json").read_text()))
    for name, (node, output) in roles.items():
        entry = tensors[name]
        assert (entry["node"], entry["op"], entry["output"]) == (node, "opforge::AddRMSNorm", output)
        assert entry["ok"] is True and entry["rule"].startswith("opforge::AddRMSNorm spec float32")
    assert tensors["/b1/mm"]["output"] == ""  # a node of one output names none


@pytest.mark.parametrize("tensor, node, output", [("/b1/h", "b1_norm", "H"), ("/b1/y", "b1_norm", "Y"),
                                                  ("h", "b2_norm", "H")])
def test_a_value_corrupted_in_one_output_is_found_at_that_node_and_output(tmp_path, align,
                                                                           ort_library, tensor,
                                                                           node, output):
    path = tmp_path / "stream.onnx"
    residual_stream(path)
    golden = tmp_path / "golden.npz"
    saved = align("run", path, "--runtimes", "ort,reference", "--all-tensors", "--save-outputs", golden)
    assert saved.returncode == 0, saved.stdout + saved.stderr
    data = dict(np.load(golden))
    data[tensor][1, 5] += np.float32(0.5)  # one element; the node's other output untouched
    np.savez(golden, **data)
    proc = align("run", path, "--runtimes", "ort", "--all-tensors", "--load-outputs", golden,
                 "--json", tmp_path / "r.json", "--report", tmp_path / "report")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["first_divergence"] == {"tensor": tensor, "node": node, "op": "opforge::AddRMSNorm",
                                          "output": output, "subject": "ort", "baseline": "stored"}
    bad = [t for t in report["tensors"] if t["ok"] is False]
    assert [(t["name"], t["mismatched"], t["worst"]["index"]) for t in bad] == [(tensor, 1, [1, 5])]
    assert f"(node {node}, opforge::AddRMSNorm output {output})" in proc.stdout
    assert f"opforge::AddRMSNorm output {output}" in (tmp_path / "report" / "report.md").read_text()


def test_an_exported_residual_stream_aligns_with_its_torch_program(tmp_path, align, ort_library):
    torch = pytest.importorskip("torch", reason="the export needs torch")
    opforge_torch = pytest.importorskip("opforge_torch", reason="the model calls opforge_torch")
    from opforge_torch import onnx as opforge_onnx

    class ResidualStream(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.proj = torch.nn.Linear(WIDTH, WIDTH)
            self.w1 = torch.nn.Parameter(torch.rand(WIDTH) + 0.5)
            self.w2 = torch.nn.Parameter(torch.rand(WIDTH) + 0.5)

        def forward(self, x, residual):
            y1, h1 = opforge_torch.add_rms_norm(x, residual, self.w1, 1e-5)
            return opforge_torch.add_rms_norm(self.proj(y1), h1, self.w2)

    gen = torch.Generator().manual_seed(1)
    module = ResidualStream().eval()
    args = (torch.randn(BATCH, WIDTH, generator=gen), torch.randn(BATCH, WIDTH, generator=gen))
    path = opforge_onnx.export(module, args, str(tmp_path / "stream.onnx"), dynamo=False,
                               opset_version=17, input_names=["x", "r"], output_names=["y", "h"])
    torch.export.save(torch.export.export(module, args), str(tmp_path / "stream.pt2"))
    graph = onnx.load(path).graph
    norms = [n for n in graph.node if n.domain == spec.DOMAIN]
    assert [n.op_type for n in norms] == ["AddRMSNorm", "AddRMSNorm"]
    assert norms[1].input[1] == norms[0].output[1]  # H of the first is the residual of the second
    every = align("run", path, "--runtimes", "ort,reference", "--all-tensors", "--json",
                  tmp_path / "every.json")
    assert every.returncode == 0, every.stdout + every.stderr
    outputs = [(t["node"], t["output"]) for t in json.loads((tmp_path / "every.json").read_text())["tensors"]
               if t["op"] == "opforge::AddRMSNorm"]
    assert [o for _, o in outputs] == ["Y", "H", "Y", "H"]
    program = align("run", path, "--runtimes", "torch,ort,reference", "--exported-program",
                    tmp_path / "stream.pt2", "--json", tmp_path / "program.json")
    assert program.returncode == 0, program.stdout + program.stderr
    compared = json.loads((tmp_path / "program.json").read_text())["tensors"]
    assert [t["name"] for t in compared] == ["y", "h"]
    assert {c["subject"] for t in compared for c in t["comparisons"]} == {"torch", "ort"}


def test_a_harness_check_compares_each_output_and_names_the_one_that_diverged():
    from opforge_align.harness.checks import against_reference, inject_fault, same_bits

    op = spec.ADD_RMS_NORM
    case = next(c for c in op.cases("float32") if c.name == "random")
    y, h = (v.astype(np.float32) for v in op.reference(*case.inputs, **case.attrs))
    where = {"layer": "2", "subject": "test", "case": case.name}

    def judged(actual):
        return against_reference(op, actual, case.inputs, case.attrs, "float32", **where)

    assert judged((y, h)).passed
    wrong_h = h.copy()
    wrong_h[2, 7] += 1.0
    check = judged((y, wrong_h))
    assert (check.passed, check.output, check.mismatched) == (False, "H", 1)
    assert check.detail.startswith("output H: ") and "output Y" not in check.detail
    assert not judged(inject_fault("sign", (y, h), "float32")).passed
    one_output = judged(y)
    assert not one_output.passed and one_output.detail == "outputs: expected 2 (Y, H), got 1"
    ulp_in_y = same_bits(op, (np.nextafter(y, np.float32(np.inf)), h), (y, h), case.inputs,
                         "float32", against="torch", **where)
    assert (ulp_in_y.passed, ulp_in_y.output, ulp_in_y.max_ulp) == (False, "Y", 1.0)
