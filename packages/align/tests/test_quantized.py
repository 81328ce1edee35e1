"""An op whose output has its own dtype (RMSNormQuant: Q int8 or float8 e4m3fn picked by an enum
attribute, a float32 per-row Scale [..., 1]): Q judged in quantization steps (equal, or one step
off and counted), Scale within the spec's tolerance; a clean model aligns (exit 0), a corrupted
weight at that node is found there (exit 1)."""
import json

import numpy as np
import onnx
import pytest
from models import tensors_by_name
from onnx import TensorProto, helper, numpy_helper

import opforge_spec as spec
from opforge_align.compare import measure_quantized
from opforge_align.model import dtype_names, load

OP = spec.OPS.get("RMSNormQuant")
pytestmark = pytest.mark.skipif(OP is None, reason="the spec has no RMSNormQuant")
ROWS, WIDTH = 6, 64
OPSETS = [helper.make_opsetid("", 17), helper.make_opsetid(spec.DOMAIN, spec.DOMAIN_VERSION)]
Q_TYPES = {"int8": TensorProto.INT8, "float8_e4m3fn": TensorProto.FLOAT8E4M3FN}


def quant_model(path, *, quant: str = "int8", weight=None) -> np.ndarray:
    """x [batch, WIDTH] -> MatMul -> RMSNormQuant (W an initializer) -> q, scale; returns W."""
    rng = np.random.default_rng(5)
    drawn = rng.uniform(0.5, 1.5, WIDTH).astype(np.float32)
    w = drawn if weight is None else weight
    mm = (rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "mm"], ["h"], name="proj"),
             helper.make_node("RMSNormQuant", ["h", "w"], ["q", "scale"], domain=spec.DOMAIN, name="quant",
                              epsilon=1e-5, quant_dtype=spec.DTYPE_CODES[quant])]
    graph = helper.make_graph(
        nodes, "quant", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", WIDTH])],
        [helper.make_tensor_value_info("q", Q_TYPES[quant], ["batch", WIDTH]),
         helper.make_tensor_value_info("scale", TensorProto.FLOAT, ["batch", 1])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(mm, "mm")])
    onnx.save(helper.make_model(graph, opset_imports=OPSETS, ir_version=8), str(path))
    return w


def test_a_clean_model_aligns_and_q_is_judged_in_steps(tmp_path, align, ort_library):
    path = tmp_path / "quant.onnx"
    quant_model(path)
    proc = align("run", path, "--runtimes", "ort,reference", "--all-tensors", "--json", tmp_path / "r.json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    tensors = tensors_by_name(json.loads((tmp_path / "r.json").read_text()))
    q, scale = tensors["q"], tensors["scale"]
    assert (q["op"], q["output"], scale["output"]) == ("opforge::RMSNormQuant", "Q", "Scale")
    assert q["ok"] is True and q["quantized"] == "int8" and q["dtype"] == "int8", q
    assert isinstance(q["off_by_one"], int) and q["max_ulp"] <= 1, q  # in steps
    assert scale["ok"] is True and scale["shape"][1:] == [1] and "quantized" not in scale, scale


def test_a_corrupted_weight_is_found_at_that_node(tmp_path, align, ort_library):
    path = tmp_path / "quant.onnx"
    w = quant_model(path)
    golden = tmp_path / "golden.npz"
    saved = align("run", path, "--runtimes", "ort,reference", "--all-tensors", "--save-outputs", golden)
    assert saved.returncode == 0, saved.stdout + saved.stderr
    corrupted = w.copy()
    corrupted[7] *= 3.0  # one column of W: every row's Q there, and the rows' scales, move
    quant_model(path, weight=corrupted)
    proc = align("run", path, "--runtimes", "ort", "--all-tensors", "--load-outputs", golden,
                 "--json", tmp_path / "r.json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    first = report["first_divergence"]
    assert (first["node"], first["op"]) == ("quant", "opforge::RMSNormQuant"), first
    assert tensors_by_name(report)["h"]["ok"] is True  # upstream of the node: untouched
    assert "quantization step off" in proc.stdout or "outside" in proc.stdout, proc.stdout


def test_one_step_off_is_allowed_and_counted_two_steps_are_not():
    expected = np.array([[0.0, 3.0, -7.0, 127.0]])
    one = np.array([[0, 4, -7, 126]], np.int8)
    two = np.array([[0, 5, -7, 127]], np.int8)
    ok = measure_quantized(one, expected, "int8")
    assert ok.ok and ok.off_by_one == 2 and ok.mismatched == 0 and ok.max_ulp == 1.0
    bad = measure_quantized(two, expected, "int8")
    assert not bad.ok and bad.mismatched == 1 and bad.worst_index == (0, 1) and bad.max_ulp == 2.0


def test_float8_steps_follow_the_binade():
    """float8 e4m3fn's step is 2^(e-3): 1 at [8, 16), 32 at [256, 448]."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    expected = np.array([10.0, 320.0])
    one = np.array([11.0, 352.0]).astype(ml_dtypes.float8_e4m3fn)
    two = np.array([12.0, 320.0]).astype(ml_dtypes.float8_e4m3fn)
    assert measure_quantized(one, expected, "float8_e4m3fn").off_by_one == 2
    assert measure_quantized(two, expected, "float8_e4m3fn").mismatched == 1


@pytest.mark.parametrize("quant", ["int8", "float8_e4m3fn"])
def test_dtype_names_know_each_outputs_own_dtype(tmp_path, quant):
    """The inference-only copy types an opforge node's outputs by the spec: Q by its attribute,
    Scale float32 (not X's type, as a stand-in of X would say)."""
    path = tmp_path / "quant.onnx"
    quant_model(path, quant=quant)
    names = dtype_names(load(path).proto)
    assert (names["q"], names["scale"], names["h"]) == (quant, "float32", "float32")


def test_the_reference_gives_float8_outputs_ort_cannot(tmp_path, align):
    """quant_dtype float8 runs in the reference (ORT's custom-op API serves one Q type: int8), its
    Q stored and read back within one step."""
    path = tmp_path / "quant8.onnx"
    quant_model(path, quant="float8_e4m3fn")
    golden = tmp_path / "golden.npz"
    saved = align("run", path, "--runtimes", "reference", "--reference-precision", "model", "--save-outputs", golden)
    assert saved.returncode == 0, saved.stdout + saved.stderr
    again = align("run", path, "--runtimes", "reference", "--load-outputs", golden, "--json", tmp_path / "r.json")
    assert again.returncode == 0, again.stdout + again.stderr
    q = tensors_by_name(json.loads((tmp_path / "r.json").read_text()))["q"]
    assert q["ok"] is True and q["quantized"] == "float8_e4m3fn", q
