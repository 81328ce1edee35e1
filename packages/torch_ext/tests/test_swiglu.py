"""SwiGLU through the torch integration: autograd (any order), opcheck, compile, export, ONNX."""

import numpy as np
import onnx
import pytest
import torch

import opforge_spec as spec
import opforge_torch
import opforge_torch.onnx as opforge_onnx


def _composed(x, beta=1.0):
    a, b = x.chunk(2, dim=-1)
    return a * torch.sigmoid(beta * a) * b


def test_defaults_are_the_specs():
    x = torch.randn(3, 2 * 5, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(opforge_torch.swiglu(x), torch.ops.opforge.swiglu(x, 1.0))
    torch.testing.assert_close(torch.ops.opforge.swiglu(x), _composed(x, spec.SWIGLU.defaults()["beta"]))


def test_opcheck():
    torch.manual_seed(0)
    x = torch.randn(3, 4, 2 * 9, requires_grad=True)
    samples = [(torch.ops.opforge.swiglu.default, (x, 1.5)),
               (torch.ops.opforge.swiglu.default, (x.detach()[..., ::2].contiguous()[..., :6], -0.5)),
               (torch.ops.opforge.swiglu.default, (x.detach().transpose(0, 1), 1.0)),
               (torch.ops.opforge.swiglu_backward.default, (torch.randn(3, 4, 9), x.detach(), 1.5)),
               (torch.ops.opforge.swiglu_backward.default,
                (torch.randn(3, 4, 9).requires_grad_(), x, 1.5))]
    for op, args in samples:
        torch.library.opcheck(op, args)


@pytest.mark.parametrize("beta", [1.0, -0.7, 0.0])
def test_gradcheck_and_gradgradcheck(beta):
    torch.manual_seed(0)
    x = torch.randn(4, 2 * 7, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: opforge_torch.swiglu(t, beta), (x,))
    assert torch.autograd.gradgradcheck(lambda t: opforge_torch.swiglu(t, beta), (x,))


def test_backward_matches_composed_float32():
    torch.manual_seed(0)
    x = torch.randn(64, 2 * 33, requires_grad=True)
    g = torch.randn(64, 33)
    (got,) = torch.autograd.grad(opforge_torch.swiglu(x, 1.3), x, g)
    (want,) = torch.autograd.grad(_composed(x, 1.3), x, g)
    rtol, atol = spec.SWIGLU.tolerance("float32")
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol)


def test_torch_compile_fullgraph_forward_and_backward():
    torch._dynamo.reset()
    x = torch.randn(4, 2 * 16, generator=torch.Generator().manual_seed(0), requires_grad=True)
    compiled = torch.compile(lambda t: opforge_torch.swiglu(t, 1.2) * 2.0, fullgraph=True,
                             backend="aot_eager")
    got = compiled(x)
    torch.testing.assert_close(got, _composed(x, 1.2) * 2.0)
    (gx,) = torch.autograd.grad(got.sum(), x)
    (ex,) = torch.autograd.grad((_composed(x, 1.2) * 2.0).sum(), x)
    torch.testing.assert_close(gx, ex)


def test_torch_export_keeps_one_node_with_a_dynamic_batch():
    class M(torch.nn.Module):
        def forward(self, x):
            return opforge_torch.swiglu(x, 0.9)

    batch = torch.export.Dim("batch")
    gen = torch.Generator().manual_seed(0)
    program = torch.export.export(M(), (torch.randn(4, 16, generator=gen),), dynamic_shapes={"x": {0: batch}})
    targets = [n.target for n in program.graph.nodes if n.op == "call_function"]
    assert targets.count(torch.ops.opforge.swiglu.default) == 1
    x = torch.randn(7, 16, generator=gen)
    torch.testing.assert_close(program.module()(x), _composed(x, 0.9))


class _Mlp(torch.nn.Module):
    def forward(self, x):
        return opforge_torch.swiglu(x, 1.5)


EXPORTS = [(True, 18), (True, 21), (False, 13), (False, 17)]
IDS = [f"{'dynamo' if d else 'torchscript'}-opset{o}" for d, o in EXPORTS]


def _export(tmp_path, dynamo, opset, decomposed):
    path = str(tmp_path / "swiglu.onnx")
    x = torch.randn(2, 3, 2 * 5, generator=torch.Generator().manual_seed(0))
    opforge_onnx.export(_Mlp(), (x,), path, decomposed=decomposed,
                        dynamo=dynamo, opset_version=opset, input_names=["x"], output_names=["y"],
                        dynamic_axes={"x": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}})
    proto = onnx.load(path)
    onnx.checker.check_model(proto)
    return path, proto


@pytest.mark.parametrize("dynamo,opset", EXPORTS, ids=IDS)
def test_onnx_export_gives_one_swiglu_node(tmp_path, dynamo, opset):
    _, proto = _export(tmp_path, dynamo, opset, decomposed=False)
    nodes = [n for n in proto.graph.node if n.domain == "opforge"]
    assert [n.op_type for n in nodes] == ["SwiGLU"]
    assert [(a.name, a.f) for a in nodes[0].attribute] == [("beta", 1.5)]
    assert {o.domain: o.version for o in proto.opset_import}["opforge"] == 1


@pytest.mark.parametrize("dynamo,opset", EXPORTS, ids=IDS)
def test_decomposed_export_is_standard_onnx_and_matches(tmp_path, dynamo, opset):
    import onnxruntime

    path, proto = _export(tmp_path, dynamo, opset, decomposed=True)
    assert {n.domain for n in proto.graph.node} == {""}
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    gen = torch.Generator().manual_seed(1)
    for x in (torch.randn(2, 3, 10, generator=gen), torch.randn(4, 1, 10, generator=gen)):
        (got,) = session.run(None, {"x": x.numpy()})
        np.testing.assert_allclose(got, _composed(x, 1.5).numpy(), *spec.SWIGLU.tolerance("float32"))
