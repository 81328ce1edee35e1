"""The reference runtime refuses what every layer refuses - each bad case of the op spec, by the
spec's rules and in its words - and a malformed opforge node, in one line naming the node and the
op (exit 2); it never computes, nor saves a golden for, a node ONNX Runtime refuses."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import opforge_spec as spec
from opforge_align import node_checks
from opforge_align.cli import main

OPSETS = [helper.make_opsetid("", 18), helper.make_opsetid(spec.DOMAIN, spec.DOMAIN_VERSION)]
NODE = "bad_node"
BAD_CASES = [(op, case) for op in spec.OPS.values() for case in op.bad_cases()]


def _elem(array) -> int:
    return helper.np_dtype_to_tensor_dtype(np.asarray(array).dtype)


def _one_node(tmp_path, op_name: str, arrays: tuple, attrs: dict, *, inputs=None, outputs=None):
    """A model of one opforge node named NODE fed `arrays` as graph inputs; (model, inputs .npz)."""
    op = spec.OPS[op_name]
    inputs = list(op.inputs) if inputs is None else inputs
    outputs = list(op.outputs) if outputs is None else outputs
    node = helper.make_node(op_name, inputs, outputs, domain=spec.DOMAIN, name=NODE, **attrs)
    fed = {name: np.asarray(a) for name, a in zip(inputs, arrays) if name}
    graph = helper.make_graph(
        [node], "one_node",
        [helper.make_tensor_value_info(n, _elem(a), list(a.shape)) for n, a in fed.items()],
        [helper.make_tensor_value_info(n, _elem(arrays[0]), None) for n in outputs if n])
    model, feeds = tmp_path / "bad.onnx", tmp_path / "in.npz"
    onnx.save(helper.make_model(graph, opset_imports=OPSETS), str(model))
    np.savez(feeds, **fed)
    return model, feeds


def _refused(capsys, tmp_path, model, *args, runtimes="reference") -> str:
    """Runs the CLI (saving a golden); asserts exit 2, one line, no golden; returns the line."""
    golden = tmp_path / "golden.npz"
    code = main(["run", str(model), *map(str, args), "--runtimes", runtimes,
                 "--save-outputs", str(golden)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err and err.startswith("opforge-align: "), err
    assert not golden.exists()
    return err


@pytest.mark.parametrize("op, case", BAD_CASES, ids=[f"{op.name}-{c.name}" for op, c in BAD_CASES])
def test_every_bad_case_of_the_spec_is_refused_in_its_words(tmp_path, capsys, op, case):
    model, feeds = _one_node(tmp_path, op.name, case.inputs, case.attrs)
    line = _refused(capsys, tmp_path, model, "--inputs", feeds)
    assert all(part in line for part in case.mentions), line
    assert f'(node "{NODE}")' in line and ": reference: " in line, line


def _f32(*shape):
    return np.ones(shape, np.float32)


# The four the issue names, with the spec's own text (and ONNX Runtime's: every layer's)
ISSUE_CASES = {
    "broadcast_r": ("AddRMSNorm", (_f32(2, 4), _f32(1, 4), _f32(4)), {},
                    spec.ADD_RMS_NORM.r_error((2, 4), (1, 4))),
    "w_of_length_1": ("RMSNorm", (_f32(2, 4), _f32(1)), {}, spec.RMS_NORM.w_error((2, 4), (1,))),
    "r_of_another_dtype": ("AddRMSNorm", (_f32(2, 4), np.ones((2, 4), np.float16), _f32(4)), {},
                           spec.error("AddRMSNorm", "R", "float32 tensor (same dtype as X)",
                                      "float16 tensor")),
    "w_of_another_dtype": ("RMSNorm", (_f32(2, 4), np.ones(4, np.float64)), {},
                           spec.RMS_NORM.w_dtype_error("float32", "float64")),
}


@pytest.mark.parametrize("case", list(ISSUE_CASES))
def test_a_tensor_the_spec_refuses_is_refused_with_the_spec_text(tmp_path, capsys, case):
    op_name, arrays, attrs, expected = ISSUE_CASES[case]
    model, feeds = _one_node(tmp_path, op_name, arrays, attrs)
    line = _refused(capsys, tmp_path, model, "--inputs", feeds)
    assert line.strip().endswith(f'reference: {expected} (node "{NODE}")'), line


@pytest.mark.parametrize("case", list(ISSUE_CASES))
def test_onnx_runtime_refuses_them_in_the_same_words(tmp_path, capsys, ort_library, case):
    op_name, arrays, attrs, expected = ISSUE_CASES[case]
    model, feeds = _one_node(tmp_path, op_name, arrays, attrs)
    line = _refused(capsys, tmp_path, model, "--inputs", feeds, runtimes="ort,reference")
    assert f'{expected} (node "{NODE}")' in line, line


def test_add_rms_norm_without_h_is_refused_naming_the_node_and_op(tmp_path, capsys):
    model, feeds = _one_node(tmp_path, "AddRMSNorm", (_f32(2, 4), _f32(2, 4), _f32(4)), {},
                             outputs=["Y"])
    line = _refused(capsys, tmp_path, model, "--inputs", feeds)
    expected = spec.error("AddRMSNorm", "H", "a named output (the node's outputs are Y, H)", "none")
    assert line.strip().endswith(f'reference: {expected} (node "{NODE}")'), line


@pytest.mark.parametrize("op_name, inputs, outputs, expected", [
    ("RMSNorm", ["X"], ["Y"], "inputs: expected 2 (X, W), got 1"),
    ("RMSNorm", ["X", ""], ["Y"], "W: expected a named input (the node's inputs are X, W), got none"),
    ("Swish", ["X", "Q"], ["Y"], "inputs: expected 1 (X), got 2"),
    ("Swish", ["X"], ["Y", "Z"], "outputs: expected 1 (Y), got 2"),
    ("AddRMSNorm", ["X", "R", "W"], ["Y", ""],
     "H: expected a named output (the node's outputs are Y, H), got none"),
])
def test_a_malformed_node_is_one_line_naming_it(tmp_path, capsys, op_name, inputs, outputs,
                                                expected):
    arrays = tuple(_f32(2, 4) if name != "W" else _f32(4) for name in inputs)
    model, feeds = _one_node(tmp_path, op_name, arrays, {}, inputs=inputs, outputs=outputs)
    line = _refused(capsys, tmp_path, model, "--inputs", feeds)
    assert f'opforge.{op_name}: {expected} (node "{NODE}")' in line, line


def _behind_other_nodes(path, precision_r=TensorProto.FLOAT16):
    """x -> Swish -> AddRMSNorm(X, Cast(r), w): X's type known only past the opforge Swish, R's
    only from the Cast (both float64 in the reference's widened copy)."""
    nodes = [helper.make_node("Swish", ["x"], ["s"], domain=spec.DOMAIN, name="swish"),
             helper.make_node("Cast", ["r"], ["rc"], to=precision_r, name="cast"),
             helper.make_node("AddRMSNorm", ["s", "rc", "w"], ["y", "h"], domain=spec.DOMAIN,
                              name="norm")]
    graph = helper.make_graph(
        nodes, "behind",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4]),
         helper.make_tensor_value_info("r", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 4]) for n in ("y", "h")],
        [onnx.numpy_helper.from_array(_f32(4), "w")])
    onnx.save(helper.make_model(graph, opset_imports=OPSETS), str(path))
    return path


@pytest.mark.parametrize("precision", ["float64", "model"])
def test_a_dtype_known_only_inside_the_graph_is_checked_in_either_precision(tmp_path, capsys,
                                                                             precision):
    model = _behind_other_nodes(tmp_path / "behind.onnx")
    line = _refused(capsys, tmp_path, model, "--reference-precision", precision)
    expected = spec.error("AddRMSNorm", "R", "float32 tensor (same dtype as X)", "float16 tensor")
    assert line.strip().endswith(f'reference: {expected} (node "norm")'), line


def test_the_same_graph_of_one_dtype_runs(tmp_path, capsys):
    model = _behind_other_nodes(tmp_path / "same.onnx", precision_r=TensorProto.FLOAT)
    assert main(["run", str(model), "--runtimes", "reference", "--save-outputs",
                 str(tmp_path / "golden.npz")]) == 0, capsys.readouterr().err


def test_every_input_role_of_the_spec_has_a_shape_rule_here():
    roles = {role for op in spec.OPS.values() for role in op.inputs[1:]}
    assert roles <= set(node_checks.SHAPE_RULES)
