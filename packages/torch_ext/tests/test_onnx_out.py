"""ONNX export of the .out overloads: one opforge node per call through both exporters, its results
flowing to every later use of the tensors it wrote (in place, into a fresh tensor, into a slice),
so that ONNX Runtime computes what eager torch does; torch.compile keeps writing them in place."""

import numpy as np
import onnx
import pytest
import torch

import opforge_spec as spec
import opforge_torch
import opforge_torch.onnx as opforge_onnx
from opforge_torch._checks import out_names

ort = pytest.importorskip("onnxruntime")

EXPORTS = [(True, 18), (False, 17), (False, 18)]
IDS = [f"{'dynamo' if d else 'torchscript'}-opset{o}" for d, o in EXPORTS]
ATTRS = {"beta": 1.3, "epsilon": 1e-5, "quant_dtype": 3, "scale_ub": 2.0}


def _export(tmp_path, model, inputs, dynamo, opset, decomposed=False):
    path = str(tmp_path / "model.onnx")
    names = [f"in{i}" for i in range(len(inputs))]
    opforge_onnx.export(model, inputs, path, dynamo=dynamo, opset_version=opset, decomposed=decomposed,
                        input_names=names)
    proto = onnx.load(path)
    onnx.checker.check_model(proto)
    return path, proto


def _run(path, inputs, plugin=True):
    options = ort.SessionOptions()
    if plugin:
        options.register_custom_ops_library(pytest.importorskip("opforge_ort").library_path())
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    return session.run(None, {f"in{i}": t.numpy() for i, t in enumerate(inputs)})


def _opforge_nodes(proto):
    return [n.op_type for n in proto.graph.node if n.domain == spec.DOMAIN]


# ---- the smallest case: y = x * 2; swish(y, out=y) -----------------------------------
class SwishInPlace(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        opforge_torch.swish(y, out=y)
        return y + 1


@pytest.mark.parametrize("dynamo,opset", EXPORTS, ids=IDS)
def test_an_out_call_in_place_is_exported_as_its_node(tmp_path, dynamo, opset):
    torch.manual_seed(0)
    x = torch.randn(2, 8)
    path, proto = _export(tmp_path, SwishInPlace(), (x,), dynamo, opset)
    assert _opforge_nodes(proto) == ["Swish"]
    assert {o.domain: o.version for o in proto.opset_import}[spec.DOMAIN] == spec.DOMAIN_VERSION
    (got,) = _run(path, (x,))
    np.testing.assert_allclose(got, SwishInPlace()(x).numpy(), *spec.SWISH.tolerance("float32"))


# ---- every op: into a fresh tensor, into the input itself, into a slice of a bigger one ----------
def _inputs(op, rows=3, cols=8):
    gen = torch.Generator().manual_seed(1)
    return tuple(torch.rand(cols * op.split, generator=gen) + 0.5 if name == "W"
                 else torch.randn(rows, cols * op.split, generator=gen) for name in op.inputs)


def _out_shapes(op, x):
    return tuple(op.output_shape_of(name, x.shape) for name in op.outputs)


def _out_dtypes(op):
    """Each output's dtype for float32 inputs and ATTRS."""
    attrs = {a: ATTRS[a] for a in op.attributes}
    return tuple(getattr(torch, op.output_dtype(name, "float32", attrs)) for name in op.outputs)


def _used(t, factor):
    """A later use of a written tensor: float32 ones scaled (ORT has no Mul of int8 or float8)."""
    return t * factor if t.dtype == torch.float32 else t


def _assert_as_torch(op, got, expected):
    """ORT's outputs against eager torch's: a quantized one within one step (the decomposition
    rounds apart), the others within the op's float32 bars."""
    for g, e in zip(got, expected):
        if e.dtype in (torch.int8, torch.float8_e4m3fn):
            qdtype = str(e.dtype).removeprefix("torch.")
            assert spec.quantized_errors(g.astype(np.float64), e.double().numpy(), qdtype).mismatched == 0
        else:
            np.testing.assert_allclose(g, e.numpy(), *op.tolerance("float32"))


def _over_inputs(op, inputs):
    """New inputs (twice the given ones), and as outputs those the spec lets each output write over
    (Y over X, H over R), one input per output; empty when the op has none (SwiGLU, GeGLU)."""
    copies, outs, taken = [t * 2 for t in inputs], [], set()
    for output in op.outputs:
        free = [j for j, name in enumerate(op.inputs) if op.may_overwrite(output, name) and j not in taken]
        if not free:
            return copies, []
        taken.add(free[0])
        outs.append(copies[free[0]])
    return copies, outs


class EveryWay(torch.nn.Module):
    """The op's .out overload into fresh tensors, over its inputs (where its spec allows it) and into
    rows 1.. of bigger tensors, each on other inputs (the exporter would merge equal calls); every
    written tensor is used afterwards."""

    def __init__(self, op):
        super().__init__()
        self.op = op
        self.out = getattr(torch.ops.opforge, op.torch_name).out

    def _into(self, inputs, outs):
        attrs = [ATTRS[a] for a in self.op.attributes]
        self.out(*inputs, *attrs, **dict(zip(out_names(self.op), outs)))
        return outs

    def forward(self, *inputs):
        shapes = _out_shapes(self.op, inputs[0])
        dtypes = _out_dtypes(self.op)
        fresh = self._into(inputs, [inputs[0].new_empty(s, dtype=d) for s, d in zip(shapes, dtypes)])
        copies, over = _over_inputs(self.op, inputs)
        if over:
            self._into(copies, over)
        bigger = [inputs[0].new_zeros(s[0] + 1, *s[1:], dtype=d) for s, d in zip(shapes, dtypes)]
        self._into([t + 1 for t in inputs], [b[1:] for b in bigger])
        return (*(_used(f, 2) for f in fresh), *(o + 1 for o in over), *bigger)


def _calls(op):
    return 3 if _over_inputs(op, _inputs(op))[1] else 2


OPS = [pytest.param(op, id=op.name) for op in spec.OPS.values()]


@pytest.mark.parametrize("dynamo,opset", EXPORTS, ids=IDS)
@pytest.mark.parametrize("op", OPS)
def test_every_out_call_is_one_node_whose_results_the_written_tensors_hold(tmp_path, op, dynamo, opset):
    inputs = _inputs(op)
    path, proto = _export(tmp_path, EveryWay(op), inputs, dynamo, opset)
    assert _opforge_nodes(proto) == [op.name] * _calls(op)
    with torch.no_grad():
        expected = EveryWay(op)(*inputs)
    got = _run(path, inputs)
    assert len(got) == len(expected)
    _assert_as_torch(op, got, expected)


@pytest.mark.parametrize("dynamo,opset", EXPORTS, ids=IDS)
@pytest.mark.parametrize("op", OPS)
def test_every_out_call_decomposed_runs_without_the_plugin(tmp_path, op, dynamo, opset):
    inputs = _inputs(op)
    path, proto = _export(tmp_path, EveryWay(op), inputs, dynamo, opset, decomposed=True)
    assert not _opforge_nodes(proto)
    with torch.no_grad():
        expected = EveryWay(op)(*inputs)
    _assert_as_torch(op, _run(path, inputs, plugin=False), expected)


# ---- a decoder whose residual stream is updated in place (the Qwen2 case) ----------------
class InPlaceDecoder(torch.nn.Module):
    """Embedding, three layers written as serving engines write them (the residual stream updated
    in place by add_rms_norm's .out, the MLP's activation written over itself), a norm, logits."""

    def __init__(self, vocab=64, dim=32, layers=3):
        super().__init__()
        torch.manual_seed(0)  # the weights
        self.embed = torch.nn.Embedding(vocab, dim)
        self.mixers = torch.nn.ModuleList(torch.nn.Linear(dim, dim) for _ in range(layers))
        self.gate_up = torch.nn.ModuleList(torch.nn.Linear(dim, 4 * dim) for _ in range(layers))
        self.down = torch.nn.ModuleList(torch.nn.Linear(2 * dim, dim) for _ in range(layers))
        self.norms = torch.nn.ParameterList(torch.nn.Parameter(torch.rand(dim) + 0.5) for _ in range(layers + 1))
        self.head = torch.nn.Linear(dim, vocab)

    def forward(self, tokens):
        hidden = self.embed(tokens)
        residual = torch.zeros_like(hidden)
        for mixer, gate_up, down, weight in zip(self.mixers, self.gate_up, self.down, self.norms):
            hidden = mixer(hidden)
            opforge_torch.add_rms_norm(hidden, residual, weight, 1e-6, out=(hidden, residual))
            hidden = down(opforge_torch.swiglu(gate_up(hidden)))
            opforge_torch.swish(hidden, 1.0, out=hidden)
        opforge_torch.add_rms_norm(hidden, residual, self.norms[-1], 1e-6, out=(hidden, residual))
        return self.head(hidden)


@pytest.mark.parametrize("dynamo,opset", EXPORTS, ids=IDS)
def test_a_decoder_updating_its_residual_stream_in_place_gives_torch_logits(tmp_path, dynamo, opset):
    model = InPlaceDecoder().eval()
    tokens = torch.randint(0, 64, (2, 5), generator=torch.Generator().manual_seed(2))
    path = str(tmp_path / "decoder.onnx")
    with torch.no_grad():
        opforge_onnx.export(model, (tokens,), path, dynamo=dynamo, opset_version=opset, input_names=["in0"])
        expected = model(tokens)
    nodes = _opforge_nodes(onnx.load(path))
    assert sorted(nodes) == sorted(["AddRMSNorm"] * 4 + ["SwiGLU"] * 3 + ["Swish"] * 3)
    (logits,) = _run(path, (tokens,))
    np.testing.assert_allclose(logits, expected.numpy(), rtol=1e-4, atol=1e-4)


# ---- what the export leaves as it was ---------------------------------------------------------
def test_torch_compile_still_writes_out_calls_in_place():
    """The export's form of an .out call is the exporters' only: torch.compile keeps the
    auto_functionalized call, which inductor writes in place (no copy of the result)."""
    torch._dynamo.reset()
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm

    def write(x, y):
        opforge_torch.swish(x, 1.0, out=y)
        return y

    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(3))
    y = torch.empty(4, 8)
    from torch._functorch.aot_autograd import aot_function

    aot_function(write, backend)(x, y)
    code = graphs[0].code
    assert "auto_functionalized" in code and "opforge.swish.out" in code, code
    torch.testing.assert_close(y, torch.ops.opforge.swish(x, 1.0), rtol=0, atol=0)


def test_tracing_an_out_call_checks_its_outputs_as_eager_does(tmp_path):
    """Under the TorchScript exporter the kernels still check what is written (one line naming the
    op, the output and what was expected) and write it."""

    class Bad(torch.nn.Module):
        def forward(self, x):
            out = torch.empty(x.shape[0], x.shape[1] + 1)
            opforge_torch.swish(x, out=out)
            return out

    with pytest.raises(RuntimeError) as info:
        opforge_onnx.export(Bad(), (torch.zeros(2, 8),), str(tmp_path / "m.onnx"), dynamo=False, opset_version=17)
    assert str(info.value).splitlines()[0] == spec.error(
        "Swish", "out", "shape [2, 8] (shape of Y)", "[2, 9]")


# ---- writes the TorchScript exporter cannot carry: refused there, exported by dynamo -------------
def _into_a_reshaped_view(x):
    b = x.new_zeros(16)
    opforge_torch.swish(x, out=b.view(2, 8))
    return b * 1


def _into_a_tensor_viewed_before(x):
    b = x * 2
    first_row = b[0]
    opforge_torch.swish(x, out=b)
    return first_row * 1


def _into_slices_going_back(x):
    b = x.new_zeros(3, 4, 8)
    rows = b[1:]
    opforge_torch.swish(torch.stack([x, x], 1), out=rows[:, 2:])
    return b * 1


def _into_a_slice_and_an_index(x):
    b = x.new_zeros(4, 8, 3)
    opforge_torch.swish(x, out=b[2:, :, 1])
    return b * 1


class Wrap(torch.nn.Module):
    def __init__(self, function):
        super().__init__()
        self.function = function

    def forward(self, x):
        return self.function(x)


UNCARRIED = {_into_a_reshaped_view: "a view made by aten::view",
             _into_a_tensor_viewed_before: "one with a view made by aten::select before the call",
             _into_slices_going_back: "slices going back to an earlier axis"}


@pytest.mark.parametrize("function", list(UNCARRIED), ids=lambda f: f.__name__)
def test_a_write_the_torchscript_exporter_cannot_carry_is_refused_there_and_exported_by_dynamo(
        tmp_path, function):
    x = torch.randn(2, 8, generator=torch.Generator().manual_seed(4))
    with pytest.raises(RuntimeError) as info:
        _export(tmp_path, Wrap(function), (x,), dynamo=False, opset=17)
    assert str(info.value).splitlines() == [spec.error(
        "Swish", "out", "a tensor, or a slice or index of one, that no other view shares (the "
        "TorchScript exporter carries a write to nothing else; export with dynamo=True, the default)",
        UNCARRIED[function])]
    path, _ = _export(tmp_path, Wrap(function), (x,), dynamo=True, opset=18)
    (got,) = _run(path, (x,))
    np.testing.assert_allclose(got, function(x).numpy(), *spec.SWISH.tolerance("float32"))


@pytest.mark.parametrize("dynamo,opset", EXPORTS, ids=IDS)
def test_a_write_into_a_slice_and_an_index_reaches_the_base(tmp_path, dynamo, opset):
    x = torch.randn(2, 8, generator=torch.Generator().manual_seed(5))
    path, proto = _export(tmp_path, Wrap(_into_a_slice_and_an_index), (x,), dynamo, opset)
    assert _opforge_nodes(proto) == ["Swish"]
    (got,) = _run(path, (x,))
    np.testing.assert_allclose(got, _into_a_slice_and_an_index(x).numpy(), *spec.SWISH.tolerance("float32"))


@pytest.mark.parametrize("dynamo,opset", EXPORTS, ids=IDS)
def test_an_out_call_refused_under_export_is_refused_in_eager_s_one_line(tmp_path, dynamo, opset):
    """With grad mode on the decoder's out= calls take weights autograd records: eager mode refuses
    them, and so does each exporter, in the same single line (not inside the dynamo exporter's
    report of a failed step)."""
    model = InPlaceDecoder().eval()
    tokens = torch.randint(0, 64, (2, 5), generator=torch.Generator().manual_seed(2))
    with pytest.raises(RuntimeError) as eager:
        model(tokens)
    with pytest.raises(RuntimeError) as exported:
        opforge_onnx.export(model, (tokens,), str(tmp_path / "m.onnx"), dynamo=dynamo, opset_version=opset)
    assert str(exported.value).splitlines() == str(eager.value).splitlines()
    assert str(eager.value).startswith("opforge.AddRMSNorm: out: expected no tensor that autograd records")
