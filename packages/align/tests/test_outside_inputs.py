"""Files and arguments from outside the tool: each is refused with one line naming the cause
(exit 2) before any memory is taken for it, or gives the right answer - never a traceback, a
crash or a number computed from data the tool changed."""
import io
import json
import os
import zipfile

import numpy as np
import onnx
import pytest
from models import mixed
from numpy.lib import format as npy_format
from onnx import TensorProto, helper, numpy_helper

from opforge_align.cli import main

OPSET = [helper.make_opsetid("", 18)]


def one_op(path, op="Relu", dtype=TensorProto.FLOAT, shape=("batch", 4)):
    """x -> op -> y, both of `dtype` and `shape`."""
    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"], name="n0")], "one_op",
                              [helper.make_tensor_value_info("x", dtype, list(shape))],
                              [helper.make_tensor_value_info("y", dtype, list(shape))])
    onnx.save(helper.make_model(graph, opset_imports=OPSET), str(path))
    return path


def npz_claiming(path, key, shape, descr="<f4"):
    """An .npz whose member `key` has a header claiming `shape` and no data behind it."""
    header = io.BytesIO()
    npy_format.write_array_header_1_0(header, {"descr": descr, "fortran_order": False,
                                               "shape": tuple(shape)})
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{key}.npy", header.getvalue())
    return path


def refused(capsys, *args) -> str:
    """Runs the CLI; asserts exit 2 with one line on stderr and no traceback; returns the line."""
    code = main(["run", *map(str, args)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err and err.startswith("opforge-align: "), err
    return err


def accepted(capsys, tmp_path, *args) -> dict:
    """Runs the CLI with --json; asserts exit 0; returns the report."""
    report = tmp_path / "report.json"
    code = main(["run", *map(str, args), "--json", str(report)])
    assert code == 0, capsys.readouterr().err
    return json.loads(report.read_text())


# ---------------------------------------------------------------- files that are not what they say

def test_a_npy_file_given_as_inputs_is_named_as_such(tmp_path, capsys):
    model = one_op(tmp_path / "m.onnx")
    np.save(tmp_path / "x.npy", np.ones((2, 4), np.float32))
    line = refused(capsys, model, "--inputs", tmp_path / "x.npy")
    assert "x.npy: expected an .npz" in line and "a .npy file" in line


@pytest.mark.parametrize("flag", ["--inputs", "--load-outputs"])
def test_an_npz_header_claiming_4_tib_is_refused_before_reading(tmp_path, capsys, flag):
    model = one_op(tmp_path / "m.onnx", shape=("rows", "cols"))
    key = "x" if flag == "--inputs" else "y"
    claim = npz_claiming(tmp_path / "claim.npz", key, (1 << 20, 1 << 20))
    line = refused(capsys, model, flag, claim, "--runtimes", "ort")
    assert f"'{key}'" in line and "4.0 TiB" in line and "--max-input-mib" in line


def test_a_huge_declared_input_is_refused_before_generating(tmp_path, capsys):
    model = one_op(tmp_path / "m.onnx", shape=(1 << 20, 1 << 20))
    line = refused(capsys, model)
    assert "input 'x' (generated): [1048576, 1048576] float32 takes 4.0 TiB" in line


def test_a_huge_dim_is_refused_and_the_cap_flag_moves_the_limit(tmp_path, capsys):
    model = one_op(tmp_path / "m.onnx")
    line = refused(capsys, model, "--dim", "batch=10000000")
    assert "input 'x' (generated): [10000000, 4] float32 takes 152.6 MiB" in line
    assert "over the cap of 64.0 MiB" in line
    refused(capsys, model, "--dim", "batch=1000", "--max-input-mib", "0.01")  # 15.6 KiB > 10 KiB
    report = accepted(capsys, tmp_path, model, "--dim", "batch=1000", "--max-input-mib", "1")
    assert report["inputs"]["x"]["shape"] == [1000, 4]


@pytest.mark.parametrize("args, says", [
    (["--dim", "batch=²"], "--dim"),
    (["--seed", "-1"], "--seed"),
    (["--max-input-mib", "inf"], "--max-input-mib"),
])
def test_malformed_numbers_are_usage_errors(tmp_path, capsys, args, says):
    line = refused(capsys, one_op(tmp_path / "m.onnx"), *args)
    assert says in line


def test_an_output_file_under_a_regular_file_is_one_line(tmp_path, capsys):
    model = one_op(tmp_path / "m.onnx")
    (tmp_path / "file").write_text("")
    line = refused(capsys, model, "--json", tmp_path / "file" / "r.json")
    assert str(tmp_path / "file") in line


# ---------------------------------------------------------------------------- the dtype rule

@pytest.mark.parametrize("op, model_dtype, given, expected, found", [
    ("Relu", TensorProto.FLOAT, np.array([["a"] * 4] * 2), "float32", "<U1"),
    ("Identity", TensorProto.INT64, np.full((2, 4), 1e30), "int64", "float64"),
    ("Relu", TensorProto.FLOAT, np.full((2, 4), 1 + 2j, np.complex64), "float32", "complex64"),
    ("Relu", TensorProto.FLOAT, np.ones((2, 4), np.float64), "float32", "float64"),
], ids=["string", "float-for-int64", "complex-for-float32", "float64-for-float32"])
def test_an_input_of_another_dtype_is_refused_naming_both(tmp_path, capsys, op, model_dtype,
                                                           given, expected, found):
    model = one_op(tmp_path / "m.onnx", op, model_dtype)
    np.savez(tmp_path / "in.npz", x=given)
    line = refused(capsys, model, "--inputs", tmp_path / "in.npz")
    assert f"input 'x': expected {expected} (the model's dtype)" in line and found in line


@pytest.mark.parametrize("model_dtype, given", [
    (TensorProto.INT64, np.arange(8, dtype=np.int32).reshape(2, 4)),
    (TensorProto.FLOAT, np.ones((2, 4), np.float16)),
], ids=["int32-for-int64", "float16-for-float32"])
def test_a_lossless_widening_is_accepted_and_the_report_says_so(tmp_path, capsys, model_dtype,
                                                                given):
    model = one_op(tmp_path / "m.onnx", "Identity", model_dtype)
    np.savez(tmp_path / "in.npz", x=given)
    report = accepted(capsys, tmp_path, model, "--inputs", tmp_path / "in.npz")
    wanted = helper.tensor_dtype_to_np_dtype(model_dtype)
    assert report["inputs"]["x"]["dtype"] == np.dtype(wanted).name
    assert f"input 'x': {given.dtype} data widened to the model's {np.dtype(wanted)} (lossless)" \
        in report["notes"]


@pytest.mark.parametrize("stored, found", [
    (np.full((2, 4), 1 + 5j), "complex128"),
    (np.array([["a"] * 4] * 2), "<U1"),
], ids=["complex", "string"])
def test_a_golden_of_another_kind_is_refused_naming_both(tmp_path, capsys, stored, found):
    model = one_op(tmp_path / "m.onnx")
    np.savez(tmp_path / "golden.npz", x=np.ones((2, 4), np.float32), y=stored)
    line = refused(capsys, model, "--runtimes", "ort", "--load-outputs", tmp_path / "golden.npz")
    assert "tensor 'y': expected float32 (the model's dtype)" in line and found in line


def test_a_float64_golden_of_a_float32_model_is_compared_and_noted(tmp_path, capsys):
    model = one_op(tmp_path / "m.onnx")
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    np.savez(tmp_path / "golden.npz", x=x, y=np.maximum(x, 0).astype(np.float64))
    report = accepted(capsys, tmp_path, model, "--runtimes", "ort", "--load-outputs",
                      tmp_path / "golden.npz")
    assert any("'y' float64 for float32" in note for note in report["notes"]), report["notes"]


def test_a_complex_golden_of_a_tensor_the_model_leaves_untyped_is_refused(tmp_path, capsys,
                                                                          ort_library):
    """Shape inference knows no opforge op: /l1/swish has no declared type, so the check waits
    for the dtype the runtime produces."""
    from opforge_align.model import load

    model = tmp_path / "m.onnx"
    mixed(model)
    assert "/l1/swish" not in load(model).elem_types
    golden = tmp_path / "golden.npz"
    assert main(["run", str(model), "--all-tensors", "--save-outputs", str(golden)]) == 0
    data = dict(np.load(golden))
    data["/l1/swish"] = data["/l1/swish"] + 1j
    np.savez(golden, **data)
    line = refused(capsys, model, "--runtimes", "ort", "--load-outputs", golden)
    assert "tensor '/l1/swish': expected float32" in line and "complex64" in line


@pytest.mark.parametrize("value", ["1e400,1e400", "inf,0", "0,nan", "-1,0"])
def test_a_tolerance_must_be_finite_and_not_negative(tmp_path, capsys, value):
    line = refused(capsys, one_op(tmp_path / "m.onnx"), "--tolerance", f"y={value}")
    assert "--tolerance" in line and "finite" in line


# ---------------------------------------------------------------------------- export folders

def export_folder(root, models: dict, cases: list):
    root.mkdir(parents=True, exist_ok=True)
    manifest = {"entries": [{"id": "e", "models": models, "cases": cases}]}
    (root / "manifest.json").write_text(json.dumps(manifest))
    return root


@pytest.mark.parametrize("content, says", [
    ({"entries": [{"id": "e", "cases": []}]}, "entries[0]: 'models': expected an object"),
    ({"entries": [{"id": "e", "models": {}, "cases": [{"name": "c"}]}]}, "entries[0].cases[0]"),
    ({"entries": {}}, "expected an object with an 'entries' list"),
    ("{not json", "not valid JSON"),
], ids=["no-models", "case-without-data", "entries-not-a-list", "not-json"])
def test_a_malformed_manifest_is_refused_naming_the_field(tmp_path, capsys, content, says):
    (tmp_path / "manifest.json").write_text(content if isinstance(content, str)
                                            else json.dumps(content))
    line = refused(capsys, tmp_path)
    assert "manifest.json" in line and says in line


def test_manifest_paths_stay_inside_the_folder(tmp_path, capsys):
    outside = tmp_path / "outside"
    outside.mkdir()
    one_op(outside / "model.onnx")
    np.savez(outside / "case.npz", in0=np.ones((2, 4), np.float32))
    (tmp_path / "inner").mkdir()
    os.symlink(outside / "model.onnx", tmp_path / "inner" / "link.onnx")
    inside_case = [{"name": "c", "data": "case.npz"}]
    np.savez(tmp_path / "inner" / "case.npz", in0=np.ones((2, 4), np.float32))
    for models, cases, named in [
            ({"f": "../outside/model.onnx"}, inside_case, "'../outside/model.onnx'"),
            ({"f": "link.onnx"}, inside_case, "'link.onnx'"),
            ({"f": str(outside / "model.onnx")}, inside_case, str(outside / "model.onnx")),
            ({"f": "link.onnx"}, [{"name": "c", "data": "../outside/case.npz"}],
             "'../outside/case.npz'")]:
        folder = export_folder(tmp_path / "inner", models, cases)
        line = refused(capsys, folder)
        assert named in line and "manifest.json: entries[0]" in line, line


def test_a_case_must_hold_one_array_per_model_input(tmp_path, capsys):
    folder = tmp_path / "export"
    folder.mkdir()
    one_op(folder / "m.onnx")
    np.savez(folder / "case.npz", in0=np.ones((2, 4), np.float32), in1=np.ones((2, 4), np.float32))
    export_folder(folder, {"f": "m.onnx"}, [{"name": "c", "data": "case.npz"}])
    code = main(["run", str(folder), "--json", str(tmp_path / "r.json")])
    capsys.readouterr()
    assert code == 1
    error = json.loads((tmp_path / "r.json").read_text())["runs"][0]["error"]
    assert "expected the arrays ['in0']" in error and "got ['in0', 'in1']" in error


# ---------------------------------------------------------------------------- subgraphs

def if_with_swish(path):
    """y = If(sum(x) > 0, opforge::Swish(x), Relu(x))."""
    then = helper.make_graph([helper.make_node("Swish", ["x"], ["t"], domain="opforge", beta=1.0)],
                             "then", [], [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)])
    other = helper.make_graph([helper.make_node("Relu", ["x"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0, name="sum"),
             helper.make_node("Greater", ["s", "zero"], ["c"], name="positive"),
             helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other,
                              name="branch")]
    graph = helper.make_graph(nodes, "if_swish",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
                              [numpy_helper.from_array(np.zeros((), np.float32), "zero")])
    opsets = [*OPSET, helper.make_opsetid("opforge", 1)]
    onnx.save(helper.make_model(graph, opset_imports=opsets), str(path))
    return path


def test_all_tensors_names_the_subgraphs_it_did_not_compare(tmp_path, capsys, ort_library):
    model = if_with_swish(tmp_path / "m.onnx")
    report = accepted(capsys, tmp_path, model, "--all-tensors", "--report", tmp_path / "rep")
    note = next(n for n in report["notes"] if n.startswith("not compared"))
    assert "If node 'branch'" in note and "then_branch" in note and "opforge::Swish" in note
    assert f"- note: {note}" in (tmp_path / "rep" / "report.md").read_text()
    assert [t["name"] for t in report["tensors"]] == ["s", "c", "y"]
