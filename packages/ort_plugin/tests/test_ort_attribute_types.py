"""Attributes of the wrong type and models importing another opforge version are refused at session
creation with a message naming the node, the attribute (or the domain version) and what was
expected, never replaced by a default or run with the version-1 kernels. Runs on the oldest ONNX
Runtime of the matrix (1.17.3) as well as the newest."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from ort_models import make_model, output_infos, random_inputs, result, session, value_info

import opforge_ort
import opforge_spec as spec

ATTRIBUTES = [(op.name, name) for op in spec.OPS.values() for name, attr in op.attributes.items()
              if attr.kind == "float"]
# int and enum attributes: ONNX INT attributes
INT_ATTRIBUTES = [(op.name, name) for op in spec.OPS.values() for name, attr in op.attributes.items()
                  if attr.kind != "float"]
WRONG_TYPES = {
    # ONNX attribute type: (value onnx.helper turns into it, what the message says it got)
    "STRING": ("fast", "a STRING attribute"),
    "TENSOR": (helper.make_tensor("t", TensorProto.FLOAT, [1], [0.5]), "a TENSOR attribute"),
    "FLOATS": ([0.5, 2.0], "a FLOATS attribute (2 values)"),
    "INTS": ([1, 2, 3], "an INTS attribute (3 values)"),
    "INT": (2, "an INT attribute (2)"),
    # no typed getter of ORT API 17 accepts these: found by the list getters' presence test
    "STRINGS": (["a", "b"], "an attribute of another type (not FLOAT)"),
    "GRAPH": (helper.make_graph([], "g", [], []), "an attribute of another type (not FLOAT)"),
}
WRONG_TYPES_FOR_INT = {
    "FLOAT": (2.5, "a FLOAT attribute (2.5)"),
    "STRING": ("fast", "a STRING attribute"),
    "TENSOR": (helper.make_tensor("t", TensorProto.INT64, [1], [3]), "a TENSOR attribute"),
    "FLOATS": ([0.5, 2.0], "a FLOATS attribute (2 values)"),
    "INTS": ([1, 2, 3], "an INTS attribute (3 values)"),
    "STRINGS": (["a", "b"], "an attribute of another type (not INT)"),
}


def node_model(op: str, node_name: str = "bad_node", opforge_version: int | None = 1, **attrs) -> bytes:
    """One rank-1 float32 node with the spec's inputs and outputs."""
    inputs, outputs = spec.OPS[op].inputs, spec.OPS[op].outputs
    node = helper.make_node(op, list(inputs), list(outputs), domain="opforge", name=node_name, **attrs)
    return make_model([node], [value_info(name, "float32", 1, prefix=name) for name in inputs],
                      output_infos(op, "float32"), opforge_version=opforge_version)


def session_error(model: bytes) -> str:
    with pytest.raises(Exception) as info:
        session(model)
    return str(info.value)


@pytest.mark.parametrize("type_name", sorted(WRONG_TYPES))
@pytest.mark.parametrize("op, attr", ATTRIBUTES)
def test_wrong_attribute_type_is_refused_at_session_creation(op, attr, type_name):
    value, got = WRONG_TYPES[type_name]
    expected = spec.error(op, attr, "a FLOAT attribute", got) + ' (node "bad_node")'
    assert expected in session_error(node_model(op, **{attr: value}))


@pytest.mark.parametrize("type_name", sorted(WRONG_TYPES_FOR_INT))
@pytest.mark.parametrize("op, attr", INT_ATTRIBUTES)
def test_wrong_type_of_an_int_attribute_is_refused_at_session_creation(op, attr, type_name):
    value, got = WRONG_TYPES_FOR_INT[type_name]
    expected = spec.error(op, attr, "an INT attribute", got) + ' (node "bad_node")'
    assert expected in session_error(node_model(op, **{attr: value}))


@pytest.mark.parametrize("value", [5, -1, 2**24 + 1, 2**40])
@pytest.mark.parametrize("op, attr", INT_ATTRIBUTES)
def test_int_rule_matches_the_spec(op, attr, value):
    """An INT value outside the attribute's rule (an enum's choices, an int's range) is refused
    with the spec's words; a valid one is not (the default, given explicitly, runs)."""
    expected = spec.OPS[op].attributes[attr].error(op, value)
    if expected is None:
        pytest.skip(f"{value} is valid for {op}.{attr}")
    assert f'{expected} (node "bad_node")' in session_error(node_model(op, **{attr: value}))


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan"), 1e39, -1e300])
@pytest.mark.parametrize("op, attr", ATTRIBUTES)
def test_float32_rule_matches_the_spec(op, attr, value):
    with np.errstate(over="ignore"):
        stored = float(np.float32(value))  # what AttributeProto.f holds: 1e39 is inf there
    expected = spec.OPS[op].attributes[attr].error(op, stored)
    assert f'{expected} (node "bad_node")' in session_error(node_model(op, **{attr: value}))


@pytest.mark.parametrize("op, attr", ATTRIBUTES + INT_ATTRIBUTES)
def test_absent_attribute_takes_the_default_and_a_given_one_is_used(op, attr):
    op_spec = spec.OPS[op]
    feeds = random_inputs(op, np.random.default_rng(4), (), 8)  # rank 1, as node_model declares
    given = 0.5 if op_spec.attributes[attr].kind == "float" else int(op_spec.attributes[attr].default)
    for attrs in ({}, {attr: given}):
        outputs = session(node_model(op, **attrs)).run(None, feeds)
        op_spec.check_close(result(op, outputs), op_spec.reference(*feeds.values(), **attrs), "float32")


@pytest.mark.parametrize("version", [0, 2, 7])
@pytest.mark.parametrize("op", list(spec.OPS))
def test_other_domain_version_is_refused_before_the_session(op, version):
    model = node_model(op, node_name="versioned", opforge_version=version)
    expected = (f"opforge.{op}: domain version: expected opforge version 1, got opforge version {version} "
                f'(node "versioned"')
    with pytest.raises(opforge_ort.ModelError) as info:
        opforge_ort.inference_session(model)
    assert expected in str(info.value)
    with pytest.raises(opforge_ort.ModelError, match="domain version"):
        opforge_ort.check_model(model)


def test_missing_domain_import_is_refused():
    model = node_model("Swish", opforge_version=None)
    with pytest.raises(opforge_ort.ModelError, match=r"opforge.Swish: domain version: expected opforge version 1, "
                                                     r"got no opset_import for it \(node \"bad_node\""):
        opforge_ort.inference_session(model)


def test_version_1_model_runs_through_the_checked_session():
    x = np.linspace(-2, 2, 8).astype(np.float32)
    (y,) = opforge_ort.inference_session(node_model("Swish", beta=1.5)).run(None, {"X": x})
    spec.SWISH.check_close(y, spec.SWISH.reference(x, beta=1.5), "float32")
