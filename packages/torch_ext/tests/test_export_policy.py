"""export(decomposed="auto"): standard ONNX for the ops the target runtime fuses itself (Swish on
ONNX Runtime, whose NCHWc layout pass cannot take a custom op), one opforge node for the others."""

import re

import numpy as np
import onnx
import pytest
import torch

import opforge_spec as spec
import opforge_torch
import opforge_torch.onnx as opforge_onnx

ort = pytest.importorskip("onnxruntime")
opforge_ort = pytest.importorskip("opforge_ort")


class ConvSwishSwiGLU(torch.nn.Module):
    """A conv block (channels a multiple of the NCHWc block) with Swish, then a SwiGLU head."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)  # the convolutions' initial weights
        self.conv1 = torch.nn.Conv2d(16, 32, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(32, 32, 3, padding=1)

    def forward(self, x):
        x = self.conv2(opforge_torch.swish(self.conv1(x), 1.0))
        return opforge_torch.swiglu(opforge_torch.swish(x, 1.0).mean((2, 3)), 1.0)


EXPORTS = [(True, 21), (False, 17)]
IDS = [f"{'dynamo' if d else 'torchscript'}-opset{o}" for d, o in EXPORTS]


def _export(tmp_path, decomposed, dynamo, opset):
    path = str(tmp_path / f"model-{decomposed}.onnx")
    x = torch.randn(1, 16, 12, 12, generator=torch.Generator().manual_seed(1))
    opforge_onnx.export(ConvSwishSwiGLU().eval(), (x,), path,
                        decomposed=decomposed, dynamo=dynamo, opset_version=opset)
    return path


def _optimized(tmp_path, path):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    options.register_custom_ops_library(opforge_ort.library_path())
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    return session, onnx.load(options.optimized_model_filepath).graph.node


def _reorders(nodes):
    return sum(n.op_type.startswith("Reorder") for n in nodes)


@pytest.mark.parametrize("dynamo,opset", EXPORTS, ids=IDS)
def test_auto_decomposes_swish_and_keeps_swiglu_for_onnxruntime(tmp_path, dynamo, opset):
    proto = onnx.load(_export(tmp_path, "auto", dynamo, opset))
    opforge_nodes = [n.op_type for n in proto.graph.node if n.domain == spec.DOMAIN]
    assert opforge_nodes == ["SwiGLU"]
    assert sum(n.op_type == "Sigmoid" for n in proto.graph.node) == 2
    assert {o.domain: o.version for o in proto.opset_import}[spec.DOMAIN] == spec.DOMAIN_VERSION


@pytest.mark.parametrize("dynamo,opset", EXPORTS, ids=IDS)
def test_auto_adds_no_reorder_over_the_decomposed_export(tmp_path, dynamo, opset):
    counts = {}
    for decomposed in (True, False, "auto"):
        _, nodes = _optimized(tmp_path, _export(tmp_path, decomposed, dynamo, opset))
        counts[decomposed] = _reorders(nodes)
    assert counts[True] > 0  # the conv pair runs in ORT's blocked layout at all
    assert counts[False] > counts[True], counts  # opforge Swish nodes break it (what auto avoids)
    assert counts["auto"] == counts[True], counts


def test_auto_export_matches_torch_in_onnxruntime(tmp_path):
    torch.manual_seed(0)
    model, x = ConvSwishSwiGLU().eval(), torch.randn(2, 16, 12, 12)
    path = str(tmp_path / "model.onnx")
    opforge_onnx.export(model, (x,), path, decomposed="auto", input_names=["x"],
                        dynamic_shapes={"x": {0: torch.export.Dim("batch")}})
    session, nodes = _optimized(tmp_path, path)
    assert any(n.op_type == "QuickGelu" for n in nodes)  # ORT fused the standard Swish
    (y,) = session.run(None, {"x": x.numpy()})
    with torch.no_grad():
        # float32 (2**-24 a step) through two 3x3 convolutions that ORT sums in its own order
        # (288 products each) and its fused QuickGelu: tens of steps of the outputs' size (~1)
        np.testing.assert_allclose(y, model(x).numpy(), rtol=1e-5, atol=1e-5)


def test_every_runtime_policy_names_ops_of_the_spec():
    for runtime, ops in opforge_onnx.RUNTIME_FUSES.items():
        assert ops <= set(spec.OPS), f"{runtime}: {sorted(ops - set(spec.OPS))} not in the spec"
    assert opforge_onnx.decomposed_ops(True) == frozenset(spec.OPS)
    assert opforge_onnx.decomposed_ops(False) == frozenset()
    assert opforge_onnx.decomposed_ops("auto", "tensorrt") == frozenset()


@pytest.mark.parametrize("kwargs, message", [
    ({"decomposed": "yes"}, "decomposed: expected True, False or 'auto', got 'yes'"),
    ({"decomposed": "auto", "runtime": "tvm"},
     "runtime: expected one of onnxruntime, tensorrt, got 'tvm'"),
])
def test_bad_policy_is_refused_in_one_line(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)) as info:
        opforge_onnx.export(ConvSwishSwiGLU(), (torch.zeros(1, 16, 4, 4),),
                            str(tmp_path / "m.onnx"), **kwargs)
    assert "\n" not in str(info.value)
