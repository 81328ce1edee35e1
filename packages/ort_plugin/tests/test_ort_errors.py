"""Bad inputs and attributes raise a Python exception from onnxruntime with opforge's canonical
message (op, input/attribute, expectation) and the node name; the process survives."""
from __future__ import annotations

import numpy as np
import pytest
from ort_models import (
    make_model,
    opforge_node,
    output_dtype,
    output_infos,
    session,
    single_op_model,
    value_info,
)

import opforge_spec as spec

NUMPY_TO_ONNX = {np.dtype(np.float32): "float32", np.dtype(np.float64): "float64",
                 np.dtype(np.int64): "int64", np.dtype(np.int32): "int32"}


def _bad_model(op: spec.OpSpec, case: spec.BadCase) -> bytes:
    inputs = [value_info(name, NUMPY_TO_ONNX[np.asarray(a).dtype], np.ndim(a), prefix=name)
              for name, a in zip(op.inputs, case.inputs)]
    node = opforge_node(op.name, op.inputs, op.outputs, name="bad_node", **case.attrs)
    x_type = NUMPY_TO_ONNX[np.asarray(case.inputs[0]).dtype]  # ORT infers the outputs' types from X
    return make_model([node], inputs, output_infos(op.name, x_type))  # and registration (defaults)


def _run(model: bytes, op: spec.OpSpec, inputs) -> None:
    sess = session(model)  # attribute errors surface here, at kernel creation
    sess.run(None, dict(zip(op.inputs, inputs)))


BAD_CASES = [pytest.param(op, case, id=f"{op.name}-{case.name}")
             for op in spec.OPS.values() for case in op.bad_cases()]


def _as_stored(case: spec.BadCase) -> list:
    """The mentions as the model holds the attributes: ONNX stores them as float32
    (AttributeProto.f), so 1e39 arrives as inf and the message shows inf."""
    with np.errstate(over="ignore"):
        stored = {spec.format_number(v): spec.format_number(float(np.float32(v))) for v in case.attrs.values()}
    return [stored.get(m, m) for m in case.mentions]


@pytest.mark.parametrize("op,case", BAD_CASES)
def test_spec_bad_cases_raise(op, case):
    with pytest.raises(Exception) as info:
        _run(_bad_model(op, case), op, case.inputs)
    message = str(info.value)
    for part in _as_stored(case):
        assert part in message, message
    assert 'node "bad_node"' in message, message


EXACT = [
    ("RMSNorm", (np.ones((2, 64), np.float32), np.ones(32, np.float32)), {},
     spec.error("RMSNorm", "W", "1-D tensor of length 64 (last dim of X)", "shape [32]")),
    ("RMSNorm", (np.ones((2, 4), np.float32), np.ones((1, 4), np.float32)), {},
     spec.error("RMSNorm", "W", "1-D tensor of length 4 (last dim of X)", "shape [1, 4]")),
    ("RMSNorm", (np.array(1.0, np.float32), np.ones(4, np.float32)), {},
     spec.error("RMSNorm", "X", "a tensor of rank >= 1", "a rank-0 tensor (scalar)")),
    ("RMSNorm", (np.ones((2, 4), np.float32), np.ones(4, np.float64)), {},
     spec.RMS_NORM.w_dtype_error("float32", "float64")),
    ("RMSNorm", (np.ones((2, 4), np.int32), np.ones(4, np.float32)), {},
     spec.error("RMSNorm", "X", "float32, float64 or bfloat16 tensor", "int32 tensor")),
    ("Swish", (np.ones((2, 4), np.int32),), {},
     spec.error("Swish", "X", "float32, float64 or bfloat16 tensor", "int32 tensor")),
    ("Swish", (np.ones(3, np.float32),), {"beta": float("inf")},
     spec.error("Swish", "beta", "a finite float32", "inf")),
    ("Swish", (np.ones(3, np.float32),), {"beta": 1e39},  # stored as float32: inf
     spec.error("Swish", "beta", "a finite float32", "inf")),
    ("RMSNorm", (np.ones((2, 4), np.float32), np.ones(4, np.float32)), {"epsilon": -1e-3},
     spec.error("RMSNorm", "epsilon", "a finite float32 >= 0", "-0.00100000005")),
    ("RMSNorm", (np.ones((2, 4), np.float32), np.ones(4, np.float32)), {"epsilon": float("nan")},
     spec.error("RMSNorm", "epsilon", "a finite float32 >= 0", "nan")),
    ("AddRMSNorm", (np.ones((2, 4), np.float32), np.ones((2, 3), np.float32), np.ones(4, np.float32)), {},
     spec.error("AddRMSNorm", "R", "a tensor of shape [2, 4] (the shape of X)", "shape [2, 3]")),
    ("AddRMSNorm", (np.ones((2, 4), np.float32), np.ones(8, np.float32), np.ones(4, np.float32)), {},
     spec.error("AddRMSNorm", "R", "a tensor of shape [2, 4] (the shape of X)", "shape [8]")),
    ("AddRMSNorm", (np.ones((2, 4), np.float32), np.ones((2, 4), np.float64), np.ones(4, np.float32)), {},
     spec.error("AddRMSNorm", "R", "float32 tensor (same dtype as X)", "float64 tensor")),
    ("AddRMSNorm", (np.ones((2, 4), np.float64), np.ones((2, 4), np.float64), np.ones(4, np.float32)), {},
     spec.ADD_RMS_NORM.w_dtype_error("float64", "float32")),
    ("AddRMSNorm", (np.ones((2, 4), np.float32), np.ones((2, 4), np.float32), np.ones(3, np.float32)), {},
     spec.error("AddRMSNorm", "W", "1-D tensor of length 4 (last dim of X)", "shape [3]")),
    ("AddRMSNorm", (np.ones((2, 4), np.int32), np.ones((2, 4), np.int32), np.ones(4, np.int32)), {},
     spec.error("AddRMSNorm", "X", "float32, float64 or bfloat16 tensor", "int32 tensor")),
    ("AddRMSNorm", (np.array(1.0, np.float32), np.array(1.0, np.float32), np.ones(4, np.float32)), {},
     spec.error("AddRMSNorm", "X", "a tensor of rank >= 1", "a rank-0 tensor (scalar)")),
]


@pytest.mark.parametrize("op_name,inputs,attrs,expected", EXACT, ids=[e[3].split(": ", 1)[1][:40] for e in EXACT])
def test_canonical_message(op_name, inputs, attrs, expected):
    op = spec.OPS[op_name]
    with pytest.raises(Exception) as info:
        _run(_bad_model(op, spec.BadCase("x", inputs, attrs, ())), op, inputs)
    assert f'{expected} (node "bad_node")' in str(info.value)


def test_int_attribute_is_rejected_not_ignored():
    from onnx import helper

    node = helper.make_node("Swish", ["X"], ["Y"], domain="opforge", name="int_beta", beta=2)  # INT attribute
    model = make_model([node], [value_info("X", "float32", 1)], [value_info("Y", "float32", None)])
    with pytest.raises(Exception, match=r"opforge\.Swish: beta: expected a FLOAT attribute, got an INT attribute \(2\)"):
        session(model)


def test_residual_must_match_every_dim_not_just_broadcast():
    """R of X's shape only: a broadcastable R ([1, 8] for X [3, 8]) is refused, not broadcast."""
    sess = session(single_op_model("AddRMSNorm", "float32", 2))
    x, w = np.ones((3, 8), np.float32), np.ones(8, np.float32)
    with pytest.raises(Exception) as info:
        sess.run(None, {"X": x, "R": np.ones((1, 8), np.float32), "W": w})
    assert spec.ADD_RMS_NORM.r_error((3, 8), (1, 8)) in str(info.value)
    y, h = sess.run(None, {"X": x, "R": x, "W": w})  # the same session still runs good input
    spec.ADD_RMS_NORM.check_close((y, h), spec.ADD_RMS_NORM.reference(x, x, w), "float32")


MULTI_OUTPUT = [pytest.param(op, kept, id=f"{op.name}-{'_'.join(kept) or 'none'}")
                for op in spec.OPS.values() if len(op.outputs) > 1
                for kept in (op.outputs[:1], (*op.outputs[:1], ""))]


@pytest.mark.parametrize("op,outputs", MULTI_OUTPUT)
def test_every_output_is_required(op, outputs):
    """A node that leaves out an output after Y (none, or an empty name) is refused at session
    creation, naming the output, although ORT's schema must take it as optional."""
    node = opforge_node(op.name, op.inputs, outputs, name="short_node")
    model = make_model([node], [value_info(name, "float32", 2, prefix=name) for name in op.inputs],
                       [value_info(outputs[0], output_dtype(op.name, outputs[0], "float32"), None)])
    with pytest.raises(Exception) as info:
        session(model)
    missing = op.outputs[1]
    expected = spec.error(op.name, missing, f"a named output (the node's outputs are {', '.join(op.outputs)})", "none")
    assert f'{expected} (node "short_node")' in str(info.value)


def test_process_survives_and_session_still_works_after_errors():
    sess = session(single_op_model("RMSNorm", "float32", 2))
    x = np.ones((3, 8), np.float32)
    for _ in range(3):
        with pytest.raises(Exception, match=r"opforge.RMSNorm: W"):
            sess.run(None, {"X": x, "W": np.ones(7, np.float32)})
    (y,) = sess.run(None, {"X": x, "W": np.ones(8, np.float32)})
    spec.RMS_NORM.check_close(y, spec.RMS_NORM.reference(x, np.ones(8)), "float32")
