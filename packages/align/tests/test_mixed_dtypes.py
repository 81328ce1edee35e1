"""Mixed-dtype opforge nodes (issue 31, Build 2): a float32 W beside a 16-bit X is judged, the
reference computing it with W as given; any other W dtype is refused in the spec's words
(OpSpec.w_dtype_error), every op with a weight."""
import numpy as np
import onnx
import pytest
from onnx import helper

import opforge_spec as spec
from opforge_align.cli import main

OPSETS = [helper.make_opsetid("", 18), helper.make_opsetid(spec.DOMAIN, spec.DOMAIN_VERSION)]
WEIGHTED = [op for op in spec.OPS.values() if "W" in op.inputs]


def _arrays(op, x_dtype, w_dtype):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 24)).astype(x_dtype)
    roles = {"X": x, "R": rng.standard_normal((4, 24)).astype(x_dtype),
             "W": (1.0 + 0.3 * rng.standard_normal(24)).astype(w_dtype)}
    return {name: roles[name] for name in op.inputs}


def _model(tmp_path, op, arrays):
    node = helper.make_node(op.name, list(arrays), list(op.outputs), domain=spec.DOMAIN, name="node")
    types = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
             for n, a in arrays.items()]
    graph = helper.make_graph([node], "mixed", types, [helper.make_tensor_value_info(n, 0, None) for n in op.outputs])
    path, feeds = tmp_path / "mixed.onnx", tmp_path / "in.npz"
    onnx.save(helper.make_model(graph, opset_imports=OPSETS), str(path))
    np.savez(feeds, **arrays)
    return path, feeds


def _run(tmp_path, op, arrays, capsys):
    model, feeds = _model(tmp_path, op, arrays)
    golden = tmp_path / "golden.npz"
    code = main(["run", str(model), "--inputs", str(feeds), "--runtimes", "reference",
                 "--save-outputs", str(golden)])
    return code, capsys.readouterr().err, golden


@pytest.mark.parametrize("op", WEIGHTED, ids=lambda op: op.name)
def test_a_float32_w_beside_a_float16_x_is_computed_with_w_as_given(tmp_path, capsys, op):
    arrays = _arrays(op, np.float16, np.float32)
    code, err, golden = _run(tmp_path, op, arrays, capsys)
    assert code == 0, err
    got = np.load(golden)
    want = op.reference(*(a.astype(np.float64) for a in arrays.values()))
    want = want if isinstance(want, tuple) else (want,)
    first = got[op.outputs[0]].astype(np.float64)
    if op.outputs[0] in op.output_dtypes:  # RMSNormQuant's Q: a step apart at most (ties)
        assert np.abs(first - want[0]).max() <= 1
        return
    np.testing.assert_allclose(first, want[0], rtol=1e-12, atol=0)  # the float64 reference, W as given
    rounded = dict(arrays, W=arrays["W"].astype(np.float16))
    moved = op.reference(*(a.astype(np.float64) for a in rounded.values()))
    moved = moved[0] if isinstance(moved, tuple) else moved
    assert np.abs(moved - want[0]).max() > 1e-5  # W rounded to X's dtype would show

@pytest.mark.parametrize("x_dtype, w_dtype", [(np.float16, np.float64), (np.float32, np.float16),
                                              (np.float64, np.float32)], ids=["f16-f64", "f32-f16", "f64-f32"])
@pytest.mark.parametrize("op", WEIGHTED, ids=lambda op: op.name)
def test_another_w_dtype_is_refused_in_the_spec_words(tmp_path, capsys, op, x_dtype, w_dtype):
    code, err, golden = _run(tmp_path, op, _arrays(op, x_dtype, w_dtype), capsys)
    expected = op.w_dtype_error(np.dtype(x_dtype).name, np.dtype(w_dtype).name)
    assert code == 2 and not golden.exists()
    assert err.strip().endswith(f'reference: {expected} (node "node")'), err
