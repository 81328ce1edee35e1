"""The .out overloads: write into the caller's tensors (`out`, or one per output: y_out, h_out) and
return nothing (`-> ()`), refuse a wrong output, an output partially overlapping an input or
sharing memory with another output, and out= under autograd; compile. Every op of the spec."""

import math

import pytest
import torch
from conftest import require_cuda

import opforge_spec as spec
import opforge_torch
from opforge_torch._checks import out_names

_GEN = torch.Generator().manual_seed(0)
X = torch.randn(3, 2 * 8, generator=_GEN)
R = torch.randn(3, 2 * 8, generator=_GEN)
W = torch.rand(2 * 8, generator=_GEN) + 0.5
# a value other than the default for each float attribute; int8 for a quantized output (an integer
# dtype: the tests below that need a float output or one of X's dtype say so)
ATTRS = {"beta": 1.3, "epsilon": 1e-5, "scale_ub": 2.0, "quant_dtype": 3}
OPS = list(spec.OPS)


def _spec(op):
    return spec.OPS[op]


def _args(op, x=None, r=None, w=None):
    """The op's arguments before its outputs: its tensor inputs by role, then its attributes."""
    roles = {"X": X if x is None else x, "R": R if r is None else r, "W": W if w is None else w}
    return (*(roles[n] for n in _spec(op).inputs), *(ATTRS[a] for a in _spec(op).attributes))


def _overload(op):
    return getattr(torch.ops.opforge, _spec(op).torch_name)


def _functional(op, **inputs):
    result = _overload(op)(*_args(op, **inputs))
    return result if isinstance(result, tuple) else (result,)


def _into(op, outs, **inputs):
    return _overload(op).out(*_args(op, **inputs), **dict(zip(out_names(_spec(op)), outs)))


def _shapes(op):
    """Each output's shape for X by its rule (the op's, X's, or X's with the last dim 1)."""
    return tuple(_spec(op).output_shape_of(name, X.shape) for name in _spec(op).outputs)


def _dtypes(op):
    """Each output's dtype for float32 X and ATTRS."""
    attrs = {a: ATTRS[a] for a in _spec(op).attributes}
    return tuple(getattr(torch, _spec(op).output_dtype(name, "float32", attrs)) for name in _spec(op).outputs)


def _full(shape, dtype, fill):
    """A tensor of `fill` (an integer dtype, which holds no NaN, gets -77 for it)."""
    return torch.full(shape, fill if dtype.is_floating_point or not math.isnan(fill) else -77, dtype=dtype)


def _fresh_outs(op, fill=float("nan")):
    return tuple(_full(s, d, fill) for s, d in zip(_shapes(op), _dtypes(op)))


def _like_x(op, index):
    """Whether output `index` has X's dtype and shape (the tests that put an input's memory there)."""
    name = _spec(op).outputs[index]
    return name not in _spec(op).output_dtypes and _spec(op).shape_rule(name) != "row"


def _has(op, name):
    return name in _spec(op).inputs


@pytest.mark.parametrize("op", OPS)
def test_writes_into_the_given_tensors_and_returns_nothing(op):
    outs = _fresh_outs(op)
    pointers = [o.data_ptr() for o in outs]
    assert _into(op, outs) is None
    assert [o.data_ptr() for o in outs] == pointers
    torch.testing.assert_close(outs, _functional(op), rtol=0, atol=0)


@pytest.mark.parametrize("op", OPS)
def test_the_python_entry_points_take_out_and_return_it(op):
    entry = getattr(opforge_torch, _spec(op).torch_name)
    outs = tuple(torch.empty(s, dtype=d) for s, d in zip(_shapes(op), _dtypes(op)))
    out = outs if len(outs) > 1 else outs[0]  # a tuple (y_out, h_out) for an op with two outputs
    assert entry(*_args(op), out=out) is out
    torch.testing.assert_close(outs, _functional(op), rtol=0, atol=0)


@pytest.mark.parametrize("op", OPS)
def test_non_contiguous_outs_get_the_values(op):
    wides = [torch.zeros(*s[:-1], 2 * s[-1], dtype=d) for s, d in zip(_shapes(op), _dtypes(op))]
    outs = tuple(wide[..., ::2] for wide in wides)
    _into(op, outs)
    torch.testing.assert_close(outs, _functional(op), rtol=0, atol=0)
    assert all((wide[..., 1::2] == 0).all() for wide in wides)


def _each_output(ops=OPS):
    return [pytest.param(op, i, id=f"{op}-{out_names(_spec(op))[i]}") for op in ops
            for i in range(len(_spec(op).outputs))]


@pytest.mark.parametrize("op,index", _each_output())
def test_refuses_wrong_shape_dtype_and_device(op, index):
    shape, name, dtype = _shapes(op)[index], out_names(_spec(op))[index], _dtypes(op)[index]
    output = _spec(op).outputs[index]
    bad_shape = (*shape[:-1], shape[-1] + 1)
    # an output of X's dtype names X's; one of its own dtype names itself
    dtype_of = output if output in _spec(op).output_dtypes else "X"
    cases = [
        (torch.empty(bad_shape, dtype=dtype),
         spec.error(op, name, f"shape {list(shape)} (shape of {output})", str(list(bad_shape)))),
        (torch.empty(shape, dtype=torch.float64),
         spec.error(op, name, f"dtype {str(dtype).removeprefix('torch.')} (dtype of {dtype_of})", "float64")),
        (torch.empty(shape, dtype=dtype, device="meta"), spec.error(op, name, "a tensor on cpu (device of X)", "meta")),
    ]
    for bad, message in cases:
        outs = list(_fresh_outs(op, 0.0))
        before = [o.clone() for o in outs]
        outs[index] = bad
        with pytest.raises(RuntimeError) as info:
            _into(op, outs)
        assert message in str(info.value)
        assert all(torch.equal(o, b) for i, (o, b) in enumerate(zip(outs, before)) if i != index)


@pytest.mark.parametrize("op,index", _each_output())
def test_fake_kernel_checks_and_returns_nothing(op, index):
    from torch._subclasses.fake_tensor import FakeTensorMode

    shape, name = _shapes(op)[index], out_names(_spec(op))[index]
    with FakeTensorMode() as mode:
        inputs = {"x": mode.from_tensor(X), "r": mode.from_tensor(R), "w": mode.from_tensor(W)}
        outs = [torch.empty(s, dtype=d) for s, d in zip(_shapes(op), _dtypes(op))]
        assert _into(op, outs, **inputs) is None
        outs[index] = torch.empty(*shape[:-1], shape[-1] + 1, dtype=_dtypes(op)[index])
        with pytest.raises(RuntimeError, match=f"opforge.{op}: {name}: expected shape"):
            _into(op, outs, **inputs)


# ---- partial overlap: refused, as aten refuses it; an output that is an input stays allowed ------
# where the op's spec lets that output write over that input (OpSpec.overwrites)
def _overlap_message(op, name, input_name):
    output = _spec(op).outputs[out_names(_spec(op)).index(name)]
    if not _spec(op).may_overwrite(output, input_name):
        return spec.error(op, name, f"a tensor that shares no memory with {input_name}",
                          f"one that overlaps {input_name}")
    return spec.error(op, name, f"a tensor that shares no memory with {input_name} or is {input_name} itself",
                      f"one that partially overlaps {input_name}")


# (outputs of X's dtype and shape: another dtype's check comes first)
_SHIFTED = [pytest.param(op, i, input_name, id=f"{op}-{out_names(_spec(op))[i]}-over-{input_name}")
            for op in OPS for i in range(len(_spec(op).outputs)) for input_name in ("X", "R")
            if _has(op, input_name) and _like_x(op, i)]


@pytest.mark.parametrize("op,index,input_name", _SHIFTED)
def test_an_out_shifted_one_element_over_an_input_is_refused_and_left_untouched(op, index, input_name):
    size = X.numel()
    shape = _shapes(op)[index]
    buffer = torch.randn(size + 1, generator=torch.Generator().manual_seed(1))
    before = buffer.clone()
    shifted_input = buffer[:size].view(X.shape)
    outs = list(_fresh_outs(op, 0.0))
    outs[index] = buffer[1:1 + torch.Size(shape).numel()].view(shape)
    with pytest.raises(RuntimeError) as info:
        _into(op, outs, **{input_name.lower(): shifted_input})
    assert str(info.value).splitlines()[0] == _overlap_message(op, out_names(_spec(op))[index], input_name)
    assert torch.equal(buffer, before)


@pytest.mark.parametrize("op,index", [p for p in _each_output([op for op in OPS if _has(op, "W")])
                                      if _like_x(*p.values)])
def test_an_out_overlapping_the_weight_is_refused(op, index):
    buffer = torch.rand(X.numel() + 1, generator=torch.Generator().manual_seed(2)) + 0.5
    outs = list(_fresh_outs(op, 0.0))
    outs[index] = buffer[1:].view(X.shape)
    with pytest.raises(RuntimeError) as info:
        _into(op, outs, w=buffer[:W.numel()])
    assert str(info.value).splitlines()[0] == _overlap_message(op, out_names(_spec(op))[index], "W")


_RANK1 = 8  # a rank-1 X: W then has X's shape (and Y's, H's)


def _rank1(op, seed=0, device="cpu"):
    gen = torch.Generator().manual_seed(seed)
    inputs = {"x": torch.randn(_RANK1 * _spec(op).split, generator=gen), "r": torch.randn(_RANK1, generator=gen),
              "w": torch.rand(_RANK1, generator=gen) + 0.5}
    return {name: t.to(device) for name, t in inputs.items()}


def _rank1_outs(op, device="cpu"):
    return [torch.empty(_RANK1, device=device) for _ in _spec(op).outputs]


# every output and input of the same shape (X of a gated op is twice Y's) that the spec keeps apart
_NOT_WRITTEN_OVER = [pytest.param(op, i, name, id=f"{op}-{out_names(_spec(op))[i]}-is-{name}")
                     for op in OPS for i, output in enumerate(_spec(op).outputs) for name in _spec(op).inputs
                     if not _spec(op).may_overwrite(output, name) and (name != "X" or _spec(op).split == 1)
                     and _like_x(op, i)]


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("op,index,input_name", _NOT_WRITTEN_OVER)
def test_an_out_that_is_an_input_the_spec_keeps_is_refused_and_left_untouched(op, index, input_name, device):
    """With a rank-1 X an output may be W itself (add_rms_norm's h_out=weight, normalized with the W
    it had just written over: Y off by up to 4.1). Only what the spec lets an output write over may
    be that output; any other overlap is refused, naming the output and the input."""
    if device == "cuda":
        require_cuda()
    inputs = _rank1(op, device=device)
    target = inputs[input_name.lower()]
    before = target.clone()
    outs = [torch.empty(s, dtype=d, device=device) for s, d in
            zip((_spec(op).output_shape_of(n, (_RANK1,)) for n in _spec(op).outputs), _dtypes(op))]
    outs[index] = target
    with pytest.raises(RuntimeError) as info:
        _into(op, outs, **inputs)
    assert str(info.value).splitlines() == [spec.error(
        op, out_names(_spec(op))[index], f"a tensor that shares no memory with {input_name}",
        f"{input_name} itself")]
    assert torch.equal(target, before)


@pytest.mark.parametrize("op", [op for op in OPS if _has(op, "W") and _spec(op).overwrites])
def test_a_rank1_call_writing_over_what_its_spec_allows_gives_the_functional_result(op):
    inputs = _rank1(op, seed=1)
    expected = _functional(op, **inputs)
    copies = {k: v.clone() for k, v in inputs.items()}
    over = {"Y": "x", "H": "r"}  # the in-place residual update; other outputs (Q, Scale) fresh
    outs = [copies[over[output]] if _spec(op).may_overwrite(output, over.get(output, "").upper())
            else torch.empty(_spec(op).output_shape_of(output, (_RANK1,)), dtype=dtype)
            for output, dtype in zip(_spec(op).outputs, _dtypes(op))]
    _into(op, outs, **copies)
    torch.testing.assert_close(tuple(outs), expected, rtol=0, atol=0)


_SAME_SHAPE_AS_X = [op for op in OPS if _shapes(op)[0] == tuple(X.shape) and _like_x(op, 0)]


@pytest.mark.parametrize("op", _SAME_SHAPE_AS_X)
def test_out_that_is_x_itself_or_beside_it_in_one_buffer_is_allowed(op):
    expected = _functional(op)
    x = X.clone()
    outs = (x, *_fresh_outs(op)[1:])
    _into(op, outs, x=x)
    torch.testing.assert_close(outs, expected, rtol=0, atol=0)
    buffer = torch.cat([X.reshape(-1), torch.empty(X.numel())])
    beside = (buffer[X.numel():].view(X.shape), *_fresh_outs(op)[1:])
    _into(op, beside, x=buffer[:X.numel()].view(X.shape))
    torch.testing.assert_close(beside, expected, rtol=0, atol=0)


# ---- two outputs: the in-place residual update of serving engines; outputs kept apart ----------
# two outputs of X's dtype and shape (the residual ops; RMSNormQuant's Q and Scale differ in both)
_TWO_OUTPUTS = [op for op in OPS if len(_spec(op).outputs) > 1 and all(_like_x(op, i) for i in range(2))]


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("rows,cols", [(3, 16), (5, 4099)], ids=["short-rows", "long-rows"])
@pytest.mark.parametrize("op", _TWO_OUTPUTS)
def test_in_place_residual_update_gives_the_functional_result(op, rows, cols, device):
    """h_out is the residual R and y_out is X itself (each row is read before it is written),
    as a decoder updates its residual stream in place; and each alone. Long rows take the CUDA
    row kernel that reads X and R twice."""
    if device == "cuda":
        require_cuda()
    torch.manual_seed(0)
    x, r = torch.randn(rows, cols, device=device), torch.randn(rows, cols, device=device)
    w = torch.rand(cols, device=device) + 0.5
    expected = _functional(op, x=x, r=r, w=w)
    for y_is_x in (True, False):
        xs, rs = x.clone(), r.clone()
        outs = (xs if y_is_x else torch.empty(rows, cols, device=device), rs)
        _into(op, outs, x=xs, r=rs, w=w)
        torch.testing.assert_close(outs, expected, rtol=0, atol=0)
    xs, rs = x.clone(), r.clone()
    _into(op, (rs, xs), x=xs, r=rs, w=w)  # the other way round: Y over R, H over X
    torch.testing.assert_close((rs, xs), expected, rtol=0, atol=0)


def _apart_message(op, name, other):
    return spec.error(op, name, f"a tensor that shares no memory with {other}", f"one that overlaps {other}")


@pytest.mark.parametrize("op", _TWO_OUTPUTS)
def test_outputs_sharing_memory_are_refused_and_left_untouched(op):
    names = out_names(_spec(op))
    same = torch.zeros(X.shape)
    buffer = torch.zeros(X.numel() + 1)
    for outs in ((same, same), (buffer[:X.numel()].view(X.shape), buffer[1:].view(X.shape))):
        with pytest.raises(RuntimeError) as info:
            _into(op, outs)
        assert str(info.value).splitlines()[0] == _apart_message(op, names[1], names[0])
        assert (same == 0).all() and (buffer == 0).all()


# ---- out= and autograd: refused, as aten refuses it -------------------------------------------
def _autograd_message(op, name):
    return spec.error(op, "out", "no tensor that autograd records (out= does not support automatic "
                      "differentiation; call the op without out=)", f"{name} requiring grad")


# (only a float tensor can require grad: an int8 output cannot)
_TRACKED = [pytest.param(op, name, id=f"{op}-{name}") for op in OPS
            for name, dtype in (*((n, torch.float32) for n in _spec(op).inputs), *zip(out_names(_spec(op)), _dtypes(op)))
            if dtype.is_floating_point]


@pytest.mark.parametrize("op,name", _TRACKED)
def test_out_with_a_tensor_requiring_grad_is_refused_and_outs_left_untouched(op, name):
    inputs = {"x": X.clone(), "r": R.clone(), "w": W.clone()}
    outs = _fresh_outs(op, 0.0)
    tensors = {**{n: inputs[n.lower()] for n in _spec(op).inputs}, **dict(zip(out_names(_spec(op)), outs))}
    tensors[name].requires_grad_()
    with pytest.raises(RuntimeError) as info:
        _into(op, outs, **inputs)
    assert str(info.value).splitlines()[0] == _autograd_message(op, name)
    assert all((o == 0).all() for o in outs)
    with torch.no_grad():  # nothing is recorded there, so aten takes it too
        _into(op, outs, **inputs)


@pytest.mark.parametrize("op,index", [p for p in _each_output() if _like_x(*p.values)])
def test_out_written_under_no_grad_invalidates_a_saved_tensor(op, index):
    """Writing an output bumps its version counter, so autograd refuses to use it as a stale saved
    tensor instead of computing a wrong gradient."""
    leaf = torch.randn(_shapes(op)[index], generator=torch.Generator().manual_seed(3), requires_grad=True)
    saved = leaf.sigmoid()  # sigmoid's backward uses its output
    outs = list(_fresh_outs(op))
    outs[index] = saved
    with torch.no_grad():
        _into(op, outs)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        saved.sum().backward()


# ---- torch.compile (opcheck of every overload: test_ops.py) ----------------------------------
def test_a_function_calling_every_out_overload_compiles_to_the_eager_bits():
    torch._dynamo.reset()

    def write_all(x, r, w, all_outs):
        for op, outs in zip(OPS, all_outs):
            _into(op, outs, x=x, r=r, w=w)

    eager = [_fresh_outs(op) for op in OPS]
    compiled = [_fresh_outs(op) for op in OPS]
    # caches off: a graph cached under an earlier schema of the ops (keyed by their names) would
    # stand in for this compile
    with torch._inductor.config.patch(force_disable_caches=True):
        torch.compile(write_all, fullgraph=True)(X, R, W, compiled)
    write_all(X, R, W, eager)
    for got, want in zip(compiled, eager):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_large_out_takes_streamed_stores_with_the_same_values(dtype):
    """swish.out into an output of 32 MiB or more writes with non-temporal stores (kernels/ cpu.h);
    the values are those of the allocating op (cached stores), NaN and infinities included, and an
    `out` starting mid cache line is written exactly, not a byte around it."""
    n = (32 << 20) // torch.tensor([], dtype=dtype).element_size() + 4099
    x = torch.empty(n, dtype=dtype).uniform_(-20, 20, generator=torch.Generator().manual_seed(4))
    x[:3] = torch.tensor([float("nan"), float("inf"), float("-inf")])
    room = torch.zeros(n + 40, dtype=dtype)
    out = room[5:5 + n]
    torch.ops.opforge.swish.out(x, 1.25, out=out)
    expected = torch.ops.opforge.swish(x, 1.25)
    torch.testing.assert_close(out, expected, rtol=0, atol=0, equal_nan=True)
    assert (room[:5] == 0).all() and (room[5 + n:] == 0).all()
