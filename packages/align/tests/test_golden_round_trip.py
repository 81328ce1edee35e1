"""A golden saved by the tool passes its own round trip: each comparison is judged by the coarser
dtype of its two sides, so the float64 reference against a float32 golden gets float32's budget
(the golden holds no more than float32), and ORT against the float64 reference still does."""
import json

import numpy as np
import onnx
from models import mixed, tensors_by_name
from onnx import TensorProto, helper

from opforge_align.cli import main
from opforge_align.compare import judged_dtype, measure


def _tanh(path):
    graph = helper.make_graph([helper.make_node("Tanh", ["x"], ["y"], name="tanh")], "tanh",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    return path


def _round_trip(capsys, tmp_path, model, *flags) -> dict:
    golden, report = tmp_path / "golden.npz", tmp_path / "r.json"
    assert main(["run", str(model), *flags, "--save-outputs", str(golden)]) == 0
    code = main(["run", str(model), *flags, "--load-outputs", str(golden), "--json", str(report)])
    assert code == 0, capsys.readouterr()
    return json.loads(report.read_text())


def test_a_float32_golden_passes_its_round_trip_with_the_default_runtimes(tmp_path, capsys):
    result = _round_trip(capsys, tmp_path, _tanh(tmp_path / "tanh.onnx"))
    judged = {c["subject"]: c for c in tensors_by_name(result)["y"]["comparisons"]}
    assert judged["reference"]["ok"] and judged["reference"]["rule"] == "default float32"
    assert judged["ort"]["max_abs"] == 0.0  # ORT against its own saved outputs


def test_every_tensor_of_a_model_with_opforge_ops_passes_its_round_trip(tmp_path, capsys,
                                                                        ort_library):
    model = tmp_path / "mixed.onnx"
    mixed(model)
    result = _round_trip(capsys, tmp_path, model, "--all-tensors")
    assert result["ok"] and result["first_divergence"] is None
    swish = {c["subject"]: c for c in tensors_by_name(result)["/l1/swish"]["comparisons"]}
    assert swish["reference"]["rule"] == "opforge::Swish spec float32 + upstream"


def test_a_float64_side_is_judged_by_the_float32_side_in_either_role():
    rng = np.random.default_rng(11)
    exact = rng.standard_normal(64)
    single = exact.astype(np.float32)
    assert judged_dtype(exact, single) == judged_dtype(single, exact) == "float32"
    assert judged_dtype(exact, exact) == "float64"
    assert judged_dtype(np.zeros(3, np.float16), single) == "float16"
    assert judged_dtype(np.arange(3), exact) is None  # integers: exact


def test_the_ulp_and_the_overflow_of_a_float64_side_are_read_in_float32():
    expected = np.array([1.0, np.inf], np.float32)           # 1e39 was stored as float32: inf
    actual = np.array([1.0 + 2.0**-23, 1e39])                # one float32 ulp off; inf in float32
    m = measure(actual, expected, 1e-5, 1e-6)
    assert m.ok and m.max_ulp == 1.0 and m.mismatched == 0
