"""The plugins driven through TensorRT's plugin interface by a C++ host (tests/trt_host.cc) compiled
against the same TensorRT headers: what TensorRT's builder and runtime call, minus TensorRT."""
from __future__ import annotations

import math
import subprocess

import numpy as np
import pytest

import opforge_trt

try:
    import opforge_spec
except ImportError:  # the spec-driven tests below skip; the host's own checks still run
    opforge_spec = None

CHECKS = ["creators", "roundtrip", "bad_fields", "formats", "shapes", "configure", "clone_attach", "enqueue",
          # field collections from outside (ONNX attributes, an engine's serialized state)
          "serialized_state", "field_structure", "float32_rule",
          "swiglu",  # output shape d from the symbolic [..., 2d], odd last dim and rank 0 refused
          "residual",  # AddRMSNorm: X, R, W -> Y, H through every call that sees them; a wrong R refused
          "quant"]  # RMSNormQuant: Q int8/fp8 and Scale float32 [..., 1], quant_dtype an int32 field


def _run(host, check, *extra):
    return subprocess.run([str(host), opforge_trt.library_path(), check, *extra], capture_output=True, text=True,
                          timeout=60)


def _checks() -> list:
    """CHECKS, the quant check where the spec has its op (RMSNormQuant)."""
    has_quant = opforge_spec is not None and "RMSNormQuant" in opforge_spec.OPS
    return [pytest.param(c, marks=pytest.mark.skipif(c == "quant" and not has_quant, reason="no RMSNormQuant in the spec"))
            for c in CHECKS]


@pytest.mark.parametrize("check", _checks())
def test_host_check(host, check):
    run = _run(host, check)
    assert run.returncode == 0, run.stdout + run.stderr  # a crash is a negative status
    assert "FAIL" not in run.stdout
    assert run.stdout.count("ok ") >= 3, run.stdout  # the checks really ran


def test_messages_go_to_stderr_without_a_logger_finder(host):
    """Loaded without setLoggerFinder (a host that never calls it), errors are still said."""
    run = _run(host, "configure", "--no-logger")
    # the host's own expectations about captured log lines fail; the plugin's words are on stderr
    assert "opforge.RMSNorm: W: expected 1-D tensor of length 64 (last dim of X), got shape [32]" in run.stderr
    assert run.returncode in (0, 1), run.returncode  # never a crash


def test_the_host_detects_a_wrong_library(host, tmp_path):
    """The host itself can fail: a library whose creators' names differ is caught."""
    data = open(opforge_trt.library_path(), "rb").read()
    assert data.count(b"RMSNorm\0") >= 1
    broken = tmp_path / "libbroken.so.1"
    broken.write_bytes(data.replace(b"RMSNorm\0", b"RMSNorn\0"))
    run = subprocess.run([str(host), str(broken), "creators"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 1 and "FAIL creator RMSNorm registered" in run.stdout, run.stdout


def test_the_manifest_lists_the_creators_getcreators_returns(host):
    """The loader reads the manifest before dlopen: its ops are the library's V3 creators (plugin
    namespace = domain, plugin version = op version), one per op of the spec."""
    run = _run(host, "list")
    assert run.returncode == 0, run.stdout + run.stderr
    creators = [line.split()[1:] for line in run.stdout.splitlines() if line.startswith("creator ")]
    assert creators and all(c[0] == "V3ONE" for c in creators), creators
    registered = sorted((namespace, name, int(version)) for _, namespace, name, version in creators)
    listed = sorted((op["domain"], op["name"], op["version"]) for op in opforge_trt.manifest()["ops"])
    assert listed == registered, f"manifest {listed}, getCreators {registered}"
    assert sorted(name for _, name, _ in registered) == sorted(opforge_trt.OPS)


needs_spec = pytest.mark.skipif(opforge_spec is None, reason="pip install ./kernels (opforge_spec)")


def _attribute_bad_cases():
    if opforge_spec is None:
        return []
    return [pytest.param(op, case, id=f"{op.name}-{case.name}") for op in opforge_spec.OPS.values()
            for case in op.bad_cases() if case.attrs]


def _exact_in_float32(value: float) -> bool:
    if not math.isfinite(value):
        return True  # nan and inf exist in float32 too
    return opforge_spec.finite_in_float32(value) and float(np.float32(value)) == value


def _encodings(attr, value) -> list:
    """The plugin fields a value can be given as: an int or enum attribute an int32 field (an
    INT attribute through TensorRT's ONNX parser), a float one float64 and, where exact, float32."""
    if attr.kind != "float":
        return [("i32", int(value))]
    return [("f64", value)] + ([("f32", value)] if _exact_in_float32(value) else [])


def _create(host, op_name, phase, *fields):
    run = _run(host, "create", op_name, phase, *fields)
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout


@needs_spec
@pytest.mark.parametrize("phase", ["build", "runtime"])
@pytest.mark.parametrize("op,case", _attribute_bad_cases())
def test_spec_attribute_bad_cases(host, op, case, phase):
    """Every bad attribute of the spec is refused in both phases with the spec's own message; as a
    float64 field the value is reported as itself (1e+300), as a float32 field as its float32."""
    (name, value), = case.attrs.items()
    encodings = _encodings(op.attributes[name], value)
    others = [_default_field(a) for n, a in op.attributes.items() if n != name]  # a complete state
    for kind, v in encodings:
        out = _create(host, op.name, phase, f"{name}={kind}:{v!r}", *others, "format_version=i32:1")
        assert "refused" in out, out
        assert op.attributes[name].error(op.name, v) in out, out
        for mention in case.mentions:
            assert mention in out, out


def _attributes():
    return [(op.name, name) for op in opforge_spec.OPS.values() for name in op.attributes] if opforge_spec else []


def _good_field(attr) -> tuple:
    """(the field giving a valid value other than the usual default, that value as printed)."""
    if attr.kind == "enum":
        value = max(attr.choices.values())
        return f"{attr.name}=i32:{value}", str(value)
    if attr.kind == "int":
        return f"{attr.name}=i32:{int(attr.default) + 1}", str(int(attr.default) + 1)
    return f"{attr.name}=f64:0.125", "0.125"


@needs_spec
@pytest.mark.parametrize("phase", ["build", "runtime"])
@pytest.mark.parametrize("op_name,name", _attributes())
def test_spec_attribute_defaults_and_good_values(host, op_name, name, phase):
    """A good value passes in both phases; an absent one is the spec's default at build time only
    (the op's other attributes given, as an engine's state holds them all)."""
    op = opforge_spec.OPS[op_name]
    attr = op.attributes[name]
    others = [_default_field(a) for n, a in op.attributes.items() if n != name]
    field, printed = _good_field(attr)
    out = _create(host, op_name, phase, field, *others, "format_version=i32:1")
    assert f"created {name}={printed}" in out, out
    absent = _run(host, "create", op_name, phase, *others, "format_version=i32:1").stdout
    if phase == "build":  # an ONNX node without the attribute: the spec's default, as ONNX does
        assert f"created {name}={opforge_spec.format_number(float(np.float32(attr.default)))}" in absent, absent
    else:  # an engine's state without it is incomplete
        kind = "float32" if attr.kind == "float" else "int32"
        assert "refused" in absent and f"opforge.{op_name}: {name}: expected one serialized {kind} field" in absent


def _default_field(attr) -> str:
    return f"{attr.name}=f64:{attr.default!r}" if attr.kind == "float" else f"{attr.name}=i32:{int(attr.default)}"


# ---- every op of the spec: its fields, its outputs, its cases and bad inputs through the calls
# TensorRT makes (`describe`, `infer` in trt_host.cc) ----------------------------------------

TRT_TYPES = {"float32": 0, "float16": 1, "int8": 2, "int32": 3, "float8_e4m3fn": 6, "bfloat16": 7,
             "int64": 8}  # nvinfer1::DataType
FLOAT32_FIELD, INT32_FIELD = 1, 5  # nvinfer1::PluginFieldType::kFLOAT32, kINT32


def _ops():
    return list(opforge_spec.OPS.values()) if opforge_spec else []


def _output(line: str) -> tuple:
    """"output I TYPE DIMS" -> (TYPE, shape)."""
    _, _, dtype, *dims = line.split(" ")
    return int(dtype), tuple(int(d) for d in (dims[0] if dims else "").split(",") if d)


def _infer(host, op, inputs, dtype=None, w_dtype=None):
    """What the plugin says about tensors of these shapes and types (dtype: all of them, else
    each array's own; w_dtype: W's, if given): outputs [(type, shape)], the verdict ("accepted" or
    "refused <call>") and the run's whole output."""
    types = [dtype or np.asarray(a).dtype.name for a in inputs]
    if w_dtype is not None:
        types[op.inputs.index("W")] = w_dtype
    args = [f"{TRT_TYPES[t]}:{','.join(map(str, np.shape(a)))}" for t, a in zip(types, inputs)]
    run = _run(host, "infer", op.name, *args)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    outputs = [_output(line) for line in lines if line.startswith("output ")]
    verdict = next((line for line in lines if line == "accepted" or line.startswith("refused")), run.stdout)
    return outputs, verdict, run.stdout


@needs_spec
@pytest.mark.parametrize("op", _ops(), ids=lambda op: op.name)
def test_creator_fields_and_outputs_follow_the_spec(host, op):
    """The creator declares the op's attributes (name, float32[1], default) in the spec's order; a
    plugin has as many outputs as the spec's op."""
    run = _run(host, "describe", op.name)
    assert run.returncode == 0, run.stdout + run.stderr
    fields = [line.split()[1:] for line in run.stdout.splitlines() if line.startswith("field ")]
    expected = [[name, str(FLOAT32_FIELD if attr.kind == "float" else INT32_FIELD), "1",
                 opforge_spec.format_number(float(np.float32(attr.default)))] for name, attr in op.attributes.items()]
    assert fields == expected, run.stdout
    assert f"outputs {len(op.outputs)}" in run.stdout.splitlines(), run.stdout


def _cases():
    return [pytest.param(op, dtype, case, id=f"{op.name}-{dtype}-{case.name}") for op in _ops()
            for dtype in ("float32", "float16", "bfloat16") for case in op.cases(dtype) if not case.non_contiguous]


@needs_spec
@pytest.mark.parametrize("op,dtype,case", _cases())
def test_spec_cases_infer_every_output(host, op, dtype, case):
    """Each case's tensors pass every build and runtime call; each output has its shape rule (Y the
    op's, H X's, a per-row scale X's with the last dim 1) and its type (X's, or its own: the
    attributes' defaults, as `infer` creates the plugin)."""
    outputs, verdict, text = _infer(host, op, case.inputs, dtype)
    x_shape = np.shape(case.inputs[0])
    wanted = [(TRT_TYPES[op.output_dtype(name, dtype)], tuple(op.output_shape_of(name, x_shape)))
              for name in op.outputs]
    assert verdict == "accepted", text
    assert outputs == wanted, text


def _shape_and_type_bad_cases():
    """The spec's bad inputs a TensorRT network can hold (it has no float64 tensor: a float64 W is
    refused by the ONNX parser before any plugin sees it)."""
    return [pytest.param(op, case, id=f"{op.name}-{case.name}") for op in _ops() for case in op.bad_cases()
            if not case.attrs and all(np.asarray(a).dtype.name in TRT_TYPES for a in case.inputs)]


@needs_spec
@pytest.mark.parametrize("op,case", _shape_and_type_bad_cases())
def test_spec_bad_inputs_refused_at_build_time(host, op, case):
    """A bad input the spec lists is refused while the network is built (known dims), with the
    canonical message naming the op and the input; a wrong R with the spec's own text."""
    _, verdict, text = _infer(host, op, case.inputs)
    assert verdict in ("refused getOutputDataTypes", "refused getOutputShapes"), text
    errors = [line for line in text.splitlines() if line.startswith(f"log[1] opforge.{op.name}: ")]
    assert errors and ": expected " in errors[0] and ", got " in errors[0], text
    for mention in case.mentions:
        assert mention in errors[0], (case.name, text)
    if "R" in op.inputs and "R" in case.mentions:
        x, r = case.inputs[0], case.inputs[op.inputs.index("R")]
        assert errors[0] == "log[1] " + op.r_error(np.shape(x), np.shape(r)), text


# ---- a float32 W with a float16 / bfloat16 X (opforge_spec.weight_dtypes) -------------------------

def _mixed_cases():
    return [pytest.param(op, dtype, case, id=f"{op.name}-{dtype}-{case.name}") for op in _ops() if "W" in op.inputs
            for dtype in ("float16", "bfloat16") for case in op.cases(dtype) if not case.non_contiguous]


@needs_spec
@pytest.mark.parametrize("op,dtype,case", _mixed_cases())
def test_float32_w_with_a_16_bit_x_is_accepted(host, op, dtype, case):
    """Every build and runtime call accepts a float32 W; the outputs keep their types (X's, or their
    own) and shapes."""
    outputs, verdict, text = _infer(host, op, case.inputs, dtype, w_dtype="float32")
    x_shape = np.shape(case.inputs[0])
    wanted = [(TRT_TYPES[op.output_dtype(name, dtype)], tuple(op.output_shape_of(name, x_shape)))
              for name in op.outputs]
    assert verdict == "accepted", text
    assert outputs == wanted, text


@needs_spec
@pytest.mark.parametrize("x_dtype,w_dtype", [("bfloat16", "float16"), ("float16", "bfloat16"), ("float32", "float16"),
                                             ("float16", "int8")])
@pytest.mark.parametrize("op", [op for op in _ops() if "W" in op.inputs], ids=lambda op: op.name)
def test_other_w_types_are_refused_with_the_spec_text(host, op, x_dtype, w_dtype):
    inputs = [np.ones(4 if name == "W" else (2, 4)) for name in op.inputs]
    _, verdict, text = _infer(host, op, inputs, x_dtype, w_dtype=w_dtype)
    assert verdict == "refused getOutputDataTypes", text
    assert f"log[1] {op.w_dtype_error(x_dtype, w_dtype)}" in text.splitlines(), text
