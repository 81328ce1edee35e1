"""The .out overloads: write into the caller's tensor and return nothing (`-> ()`), refuse a wrong
`out`, an `out` partially overlapping an input, and out= under autograd; compile."""

import pytest
import torch

import opforge_spec as spec
import opforge_torch

X = torch.randn(3, 2 * 8)
W = torch.rand(2 * 8) + 0.5
CALLS = {  # op -> (functional call, .out call, output shape)
    "Swish": (lambda: torch.ops.opforge.swish(X, 1.3),
              lambda out: torch.ops.opforge.swish.out(X, 1.3, out=out), X.shape),
    "RMSNorm": (lambda: torch.ops.opforge.rms_norm(X, W, 1e-5),
                lambda out: torch.ops.opforge.rms_norm.out(X, W, 1e-5, out=out), X.shape),
    "SwiGLU": (lambda: torch.ops.opforge.swiglu(X, 1.3),
               lambda out: torch.ops.opforge.swiglu.out(X, 1.3, out=out), (3, 8)),
}
OUT_OPS = {"Swish": torch.ops.opforge.swish.out, "RMSNorm": torch.ops.opforge.rms_norm.out,
           "SwiGLU": torch.ops.opforge.swiglu.out}


def _out_args(op, x, w):
    """The .out overload's arguments before `out`, for X = x (and W = w)."""
    return (x, w, 1e-5) if op == "RMSNorm" else (x, 1.3)


@pytest.mark.parametrize("op", CALLS)
def test_writes_into_the_given_tensor_and_returns_nothing(op):
    functional, into, shape = CALLS[op]
    out = torch.full(shape, float("nan"))
    pointer = out.data_ptr()
    assert into(out) is None
    assert out.data_ptr() == pointer
    torch.testing.assert_close(out, functional(), rtol=0, atol=0)


@pytest.mark.parametrize("op", CALLS)
def test_the_python_entry_points_take_out_and_return_it(op):
    functional, _, shape = CALLS[op]
    entry = {"Swish": opforge_torch.swish, "RMSNorm": opforge_torch.rms_norm, "SwiGLU": opforge_torch.swiglu}[op]
    out = torch.empty(shape)
    assert entry(*_out_args(op, X, W), out=out) is out
    torch.testing.assert_close(out, functional(), rtol=0, atol=0)


@pytest.mark.parametrize("op", CALLS)
def test_a_non_contiguous_out_gets_the_values(op):
    functional, into, shape = CALLS[op]
    wide = torch.zeros(*shape[:-1], 2 * shape[-1])
    out = wide[..., ::2]
    into(out)
    torch.testing.assert_close(out, functional(), rtol=0, atol=0)
    assert (wide[..., 1::2] == 0).all()


@pytest.mark.parametrize("op", CALLS)
def test_refuses_wrong_shape_dtype_and_device(op):
    _, into, shape = CALLS[op]
    bad_shape = (*shape[:-1], shape[-1] + 1)
    cases = [
        (torch.empty(bad_shape), spec.error(op, "out", f"shape {list(shape)} (shape of Y)".replace("'", ""),
                                             str(list(bad_shape)))),
        (torch.empty(shape, dtype=torch.float64),
         spec.error(op, "out", "dtype float32 (dtype of X)", "float64")),
        (torch.empty(shape, device="meta"), spec.error(op, "out", "a tensor on cpu (device of X)", "meta")),
    ]
    for out, message in cases:
        with pytest.raises(RuntimeError) as info:
            into(out)
        assert message in str(info.value)


@pytest.mark.parametrize("op", CALLS)
def test_fake_kernel_checks_and_returns_nothing(op):
    _, into, shape = CALLS[op]
    from torch._subclasses.fake_tensor import FakeTensorMode

    global X, W
    real = X, W
    with FakeTensorMode() as mode:
        X, W = mode.from_tensor(real[0]), mode.from_tensor(real[1])
        try:
            assert into(torch.empty(shape)) is None
            with pytest.raises(RuntimeError, match=f"opforge.{op}: out"):
                into(torch.empty(*shape[:-1], shape[-1] + 1))
        finally:
            X, W = real


# ---- partial overlap: refused, as aten refuses it; `out` that is X itself stays allowed ------
def _overlap_message(op, name):
    return spec.error(op, "out", f"a tensor that shares no memory with {name} or is {name} itself",
                      f"one that partially overlaps {name}")


@pytest.mark.parametrize("op", CALLS)
def test_an_out_shifted_one_element_over_x_is_refused_and_left_untouched(op):
    _, _, shape = CALLS[op]
    size = X.numel()
    buffer = torch.randn(size + 1)
    before = buffer.clone()
    x, out = buffer[:size].view(X.shape), buffer[1:1 + torch.Size(shape).numel()].view(shape)
    with pytest.raises(RuntimeError) as info:
        OUT_OPS[op](*_out_args(op, x, W), out=out)
    assert str(info.value).splitlines()[0] == _overlap_message(op, "X")
    assert torch.equal(buffer, before)


def test_an_out_overlapping_the_weight_is_refused():
    buffer = torch.rand(X.numel() + 1) + 0.5
    w, out = buffer[:W.numel()], buffer[1:].view(X.shape)
    with pytest.raises(RuntimeError) as info:
        torch.ops.opforge.rms_norm.out(X, w, 1e-5, out=out)
    assert str(info.value).splitlines()[0] == _overlap_message("RMSNorm", "W")


@pytest.mark.parametrize("op", ["Swish", "RMSNorm"])
def test_out_that_is_x_itself_or_beside_it_in_one_buffer_is_allowed(op):
    functional, _, _ = CALLS[op]
    x = X.clone()
    OUT_OPS[op](*_out_args(op, x, W), out=x)
    torch.testing.assert_close(x, functional(), rtol=0, atol=0)
    buffer = torch.cat([X.reshape(-1), torch.empty(X.numel())])
    beside = buffer[X.numel():].view(X.shape)
    OUT_OPS[op](*_out_args(op, buffer[:X.numel()].view(X.shape), W), out=beside)
    torch.testing.assert_close(beside, functional(), rtol=0, atol=0)


# ---- out= and autograd: refused, as aten refuses it -------------------------------------------
def _autograd_message(op, name):
    return spec.error(op, "out", "no tensor that autograd records (out= does not support automatic "
                      "differentiation; call the op without out=)", f"{name} requiring grad")


@pytest.mark.parametrize("op,name", [("Swish", "X"), ("Swish", "out"), ("RMSNorm", "X"), ("RMSNorm", "W"),
                                     ("RMSNorm", "out"), ("SwiGLU", "X"), ("SwiGLU", "out")])
def test_out_with_a_tensor_requiring_grad_is_refused_and_out_left_untouched(op, name):
    _, _, shape = CALLS[op]
    tensors = {"X": X.clone(), "W": W.clone(), "out": torch.zeros(shape)}
    tensors[name].requires_grad_()
    with pytest.raises(RuntimeError) as info:
        OUT_OPS[op](*_out_args(op, tensors["X"], tensors["W"]), out=tensors["out"])
    assert str(info.value).splitlines()[0] == _autograd_message(op, name)
    assert (tensors["out"] == 0).all()
    with torch.no_grad():  # nothing is recorded there, so aten takes it too
        OUT_OPS[op](*_out_args(op, tensors["X"], tensors["W"]), out=tensors["out"])


def test_out_written_under_no_grad_invalidates_a_saved_tensor():
    """Writing `out` bumps its version counter, so autograd refuses to use it as a stale saved
    tensor instead of computing a wrong gradient."""
    leaf = torch.randn(3, 16, requires_grad=True)
    saved = leaf.sigmoid()  # sigmoid's backward uses its output
    with torch.no_grad():
        torch.ops.opforge.swish.out(X, 1.3, out=saved)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        saved.sum().backward()


# ---- torch.compile (opcheck of every overload: test_ops.py) ----------------------------------
def test_a_function_calling_every_out_overload_compiles_to_the_eager_bits():
    torch._dynamo.reset()

    def write_all(x, w, outs):
        for op, out in zip(OUT_OPS, outs):
            OUT_OPS[op](*_out_args(op, x, w), out=out)

    shapes = [CALLS[op][2] for op in OUT_OPS]
    eager = [torch.empty(s) for s in shapes]
    compiled = [torch.full(s, float("nan")) for s in shapes]
    # caches off: a graph cached under an earlier schema of the ops (keyed by their names) would
    # stand in for this compile
    with torch._inductor.config.patch(force_disable_caches=True):
        torch.compile(write_all, fullgraph=True)(X, W, compiled)
    write_all(X, W, eager)
    for got, want in zip(compiled, eager):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_large_out_takes_streamed_stores_with_the_same_values(dtype):
    """swish.out into an output of 32 MiB or more writes with non-temporal stores (kernels/ cpu.h);
    the values are those of the allocating op (cached stores), NaN and infinities included, and an
    `out` starting mid cache line is written exactly, not a byte around it."""
    n = (32 << 20) // torch.tensor([], dtype=dtype).element_size() + 4099
    x = torch.empty(n, dtype=dtype).uniform_(-20, 20)
    x[:3] = torch.tensor([float("nan"), float("inf"), float("-inf")])
    room = torch.zeros(n + 40, dtype=dtype)
    out = room[5:5 + n]
    torch.ops.opforge.swish.out(x, 1.25, out=out)
    expected = torch.ops.opforge.swish(x, 1.25)
    torch.testing.assert_close(out, expected, rtol=0, atol=0, equal_nan=True)
    assert (room[:5] == 0).all() and (room[5 + n:] == 0).all()
