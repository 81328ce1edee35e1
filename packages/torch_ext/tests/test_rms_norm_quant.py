"""RMSNormQuant in torch: the CPU kernels against the spec's reference (Q exact but where the
quotient sits within a few float32 ulps of a rounding boundary, Scale within 1 ulp), ties at .5,
the refusal of backward, opcheck, torch.compile, torch.export and both ONNX exporters (one node,
outputs of two dtypes typed in the graph). The shared layer tests (test_numerics, test_out,
test_registry, ...) run it with every other op."""

import operator

import numpy as np
import pytest
import torch
from conftest import to_numpy, to_torch

import opforge_spec as spec
import opforge_torch
from opforge_spec.ops.rms_norm_quant import FP8_TIES, INT8_TIES, near_tie_mask, quotient
from opforge_torch import onnx as opforge_onnx

OP = spec.OPS["RMSNormQuant"]
INT8, FP8 = spec.DTYPE_CODES["int8"], spec.DTYPE_CODES["float8_e4m3fn"]


def _attrs(case) -> dict:
    """The case's attributes as the kernels take them (float32 floats, defaults filled in)."""
    values = {**OP.defaults(), **case.attrs}
    return {k: float(np.float32(v)) if OP.attributes[k].kind == "float" else v for k, v in values.items()}


def _run(case, dtype):
    tensors = [to_torch(a, dtype, "cpu", case.non_contiguous) for a in case.inputs]
    return opforge_torch.rms_norm_quant(*tensors, **case.attrs)


def _off_by_one_outside_ties(case, dtype) -> tuple:
    """(elements of Q unlike the reference, those of them not near a tie, Scale's worst ulps)."""
    q, scale = _run(case, dtype)
    expected_q, expected_scale = OP.reference(*case.inputs, **case.attrs)
    got = to_numpy(q)
    differs = ~((got == expected_q) | (np.isnan(got) & np.isnan(expected_q)))
    quant = OP.output_dtype("Q", dtype, case.attrs)
    near = near_tie_mask(quotient(*(np.asarray(a, np.float64) for a in case.inputs), **_attrs(case)), quant)
    spacing = np.spacing(np.abs(expected_scale).astype(np.float32)).astype(np.float64)
    ulps = np.abs(to_numpy(scale) - expected_scale) / spacing if spacing.size else np.zeros(0)
    return int(differs.sum()), int((differs & ~near).sum()), float(ulps.max(initial=0.0))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("case", OP.cases("float32"), ids=lambda c: c.name)
def test_cpu_q_is_the_reference_but_near_ties_and_scale_within_one_ulp(case, dtype):
    """float32 and bfloat16 X compute the same float32 steps as the reference (measured: equal
    everywhere, ties included); only the sums' order may differ, so Q may differ only where the
    quotient is within 8 float32 ulps of a rounding boundary."""
    case = next(c for c in OP.cases(dtype) if c.name == case.name)  # the inputs rounded to dtype
    _, outside, scale_ulps = _off_by_one_outside_ties(case, dtype)
    assert outside == 0
    assert scale_ulps <= 1


@pytest.mark.parametrize("case", OP.cases("float64"), ids=lambda c: c.name)
def test_float64_x_is_within_one_step_and_off_only_near_ties(case):
    """float64 X computes in float64, the reference's steps are float32: Q one step off at most
    (check_close), and only near a tie."""
    q, scale = _run(case, "float64")
    OP.check_close((to_numpy(q), to_numpy(scale)), OP.reference(*case.inputs, **case.attrs), "float64",
                   label=case.name, attrs=case.attrs)
    assert _off_by_one_outside_ties(case, "float64")[1] == 0


def _case(name, dtype="float32"):
    return next(c for c in OP.cases(dtype) if c.name == name)


def test_ties_round_half_to_even_in_int8():
    """The row's mean square is a power of 4 (epsilon 0, W = 1): Scale and Y / Scale are exact,
    and Y / Scale is the listed values themselves."""
    q, scale = _run(_case("ties_int8"), "float32")
    assert scale[0].item() == scale[1].item() and np.log2(scale[0].item()).is_integer()
    assert INT8_TIES[:4] == [127.0, 63.5, 0.5, 1.5]
    assert q[0, :len(INT8_TIES)].tolist() == [127, 64, 0, 2, 2, 0, -2, -2, 4, -126, 100, -100]
    assert q[1, :len(INT8_TIES)].tolist() == [-127, -64, 0, -2, -2, 0, 2, 2, -4, 126, -100, 100]


def test_ties_round_half_to_even_in_float8():
    q, scale = _run(_case("ties_fp8"), "float32")
    assert np.log2(scale[0].item()).is_integer()
    # 17 -> 16 and 19 -> 20 (spacing 2), 9.5 -> 10 and 10.5 -> 10 (spacing 1), 1.0625 -> 1,
    # 232 -> 224 (spacing 16); 0.5625, 240, 208 and 3/256 (a subnormal) are float8 values
    expected = [448.0, 16.0, 20.0, -16.0, 10.0, 10.0, 0.5625, 1.0, -240.0, 208.0, 224.0, 0.01171875]
    assert len(expected) == len(FP8_TIES)
    assert q[0, :len(FP8_TIES)].float().tolist() == expected
    assert q[1, :len(FP8_TIES)].float().tolist() == [-v for v in expected]


def test_rows_of_zeros_nan_and_inf_are_as_the_spec_says():
    q, scale = _run(_case("zero_rows_eps0"), "float32")
    assert (q[1] == 0).all() and (q[3] == 0).all() and scale[1].item() == np.float32(2.0**-23)
    q, scale = _run(_case("nan_inf_fp8"), "float32")
    assert torch.isnan(q[1].float()).all() and scale[1].item() == np.float32(1 / (448 * 512))  # NaN row
    assert torch.isnan(q[2, 0].float()) and (q[2, 1:].float() == 0).all()  # the Inf: 0 * inf
    q, _ = _run(_case("nan_inf"), "float32")
    assert (q[1] == 0).all() and (q[2] == 0).all()


def test_the_scale_bound_saturates_q():
    q, scale = _run(_case("scale_ub"), "float32")
    assert torch.allclose(scale, torch.full_like(scale, np.float32(0.5) / 127))
    assert q.abs().max().item() == 127 and (q.abs() == 127).sum() > 4


def test_an_empty_row_has_the_smallest_scale():
    q, scale = _run(_case("empty_cols_fp8"), "float32")
    assert q.shape == (3, 0) and scale.shape == (3, 1) and (scale == np.float32(1 / (448 * 512))).all()


def test_quant_dtype_takes_the_value_the_name_or_the_torch_dtype():
    torch.manual_seed(0)
    x, w = torch.randn(2, 8), torch.rand(8) + 0.5
    by_value = opforge_torch.rms_norm_quant(x, w, quant_dtype=FP8)
    for given in ("float8_e4m3fn", torch.float8_e4m3fn):
        q, _ = opforge_torch.rms_norm_quant(x, w, quant_dtype=given)
        assert q.dtype == torch.float8_e4m3fn and torch.equal(q.view(torch.uint8), by_value[0].view(torch.uint8))
    assert opforge_torch.rms_norm_quant(x, w)[0].dtype == torch.int8


def test_backward_is_refused_naming_the_op():
    torch.manual_seed(0)
    x = torch.randn(2, 8, requires_grad=True)
    w = torch.nn.Parameter(torch.rand(8) + 0.5)
    q, scale = opforge_torch.rms_norm_quant(x, w)  # the call itself runs (an inference model's Parameters)
    assert q.dtype == torch.int8 and not q.requires_grad
    with pytest.raises(RuntimeError, match=r"^opforge\.RMSNormQuant has no gradient: "):
        scale.sum().backward()
    assert not hasattr(torch.ops.opforge, "rms_norm_quant_backward")  # no backward schema
    with torch.no_grad():
        assert not opforge_torch.rms_norm_quant(x, w)[1].requires_grad


@pytest.mark.parametrize("quant", [INT8, FP8], ids=["int8", "fp8"])
def test_opcheck(quant):
    torch.manual_seed(0)
    x, w = torch.randn(5, 24), torch.rand(24) + 0.5
    # test_schema compares the outputs with arithmetic float8 tensors lack ("mul_cpu_reduced_float"
    # not implemented for Float8_e4m3fn): every other check for float8
    utils = ("test_faketensor", "test_autograd_registration", "test_aot_dispatch_dynamic") + (
        ("test_schema",) if quant == INT8 else ())
    torch.library.opcheck(torch.ops.opforge.rms_norm_quant.default, (x, w, 1e-5, quant, 0.0), test_utils=utils)
    outs = (torch.empty(5, 24, dtype=torch.int8 if quant == INT8 else torch.float8_e4m3fn), torch.empty(5, 1))
    torch.library.opcheck(torch.ops.opforge.rms_norm_quant.out, (x, w, 1e-5, quant, 0.0),
                          {"q_out": outs[0], "scale_out": outs[1]}, test_utils=utils)


def _bits(q):
    return q.view(torch.uint8) if q.dtype == torch.float8_e4m3fn else q


@pytest.mark.parametrize("quant", [INT8, FP8], ids=["int8", "fp8"])
def test_torch_compile_fullgraph_and_dynamic_give_the_eager_bits(quant):
    torch.manual_seed(0)
    torch._dynamo.reset()
    x, w = torch.randn(6, 40), torch.rand(40) + 0.5

    def fn(x, w):
        q, scale = opforge_torch.rms_norm_quant(x, w, quant_dtype=quant)
        return q, scale * 2

    eager = fn(x, w)
    for dynamic in (False, True):
        got = torch.compile(fn, fullgraph=True, dynamic=dynamic)(x, w)
        assert torch.equal(_bits(got[0]), _bits(eager[0])) and torch.equal(got[1], eager[1])


class _Quantize(torch.nn.Module):
    def __init__(self, cols=16, quant=INT8):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.rand(cols, generator=torch.Generator().manual_seed(0)) + 0.5)
        self.quant = quant

    def forward(self, x):
        q, scale = opforge_torch.rms_norm_quant(x, self.weight, 1e-6, self.quant)
        return q, scale


def test_torch_export_keeps_one_op_and_its_values():
    torch.manual_seed(0)
    model, x = _Quantize(), torch.randn(3, 16)
    exported = torch.export.export(model, (x,))
    calls = [n.target for n in exported.graph.nodes if n.op == "call_function" and n.target is not operator.getitem]
    assert calls == [torch.ops.opforge.rms_norm_quant.default]
    with torch.no_grad():
        got, expected = exported.module()(x), model(x)
    assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])


@pytest.mark.parametrize("dynamo,opset", [(False, 17), (True, 18), (True, 21)],
                         ids=["torchscript-17", "dynamo-18", "dynamo-21"])
@pytest.mark.parametrize("quant", [INT8, FP8], ids=["int8", "fp8"])
def test_both_exporters_write_one_node_with_outputs_of_two_dtypes(tmp_path, dynamo, opset, quant):
    torch.manual_seed(0)
    import onnx

    path = str(tmp_path / "m.onnx")
    dynamic = {"dynamic_shapes": ({0: torch.export.Dim("rows")},)} if dynamo else {
        "input_names": ["x"], "dynamic_axes": {"x": {0: "rows"}}}
    with torch.no_grad():
        opforge_onnx.export(_Quantize(quant=quant), (torch.randn(3, 16),), path, dynamo=dynamo,
                            opset_version=opset, **dynamic)
    proto = onnx.load(path)
    onnx.checker.check_model(proto)
    inferred = onnx.shape_inference.infer_shapes(proto)
    nodes = [n for n in proto.graph.node if n.domain == spec.DOMAIN]
    assert [(n.op_type, len(n.output)) for n in nodes] == [("RMSNormQuant", 2)]
    assert {a.name: onnx.helper.get_attribute_value(a) for a in nodes[0].attribute}["quant_dtype"] == quant
    outputs = {o.name: o.type.tensor_type for o in inferred.graph.output}
    q, scale = (outputs[name] for name in nodes[0].output)
    assert (q.elem_type, scale.elem_type) == (quant, onnx.TensorProto.FLOAT)
    dims = [[d.dim_value or d.dim_param for d in t.shape.dim] for t in (q, scale)]
    assert dims[0][1] == 16 and dims[1][1] == 1 and isinstance(dims[0][0], str) and dims[0][0] == dims[1][0]


@pytest.mark.parametrize("dynamo,opset", [(False, 13), (True, 18)], ids=["torchscript-13", "dynamo-18"])
def test_the_decomposed_float8_form_is_refused_naming_the_attribute(tmp_path, dynamo, opset):
    torch.manual_seed(0)
    with pytest.raises(Exception, match=r"opforge\.RMSNormQuant: quant_dtype: expected 3 \(int8\) in the decomposed"):
        opforge_onnx.export(_Quantize(quant=FP8), (torch.randn(3, 16),), str(tmp_path / "m.onnx"),
                            decomposed=True, dynamo=dynamo, opset_version=opset)
