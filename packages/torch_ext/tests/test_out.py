"""The .out overloads: write into the caller's tensor, return it, refuse a wrong `out`."""

import pytest
import torch

import opforge_spec as spec
import opforge_torch  # noqa: F401

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


@pytest.mark.parametrize("op", CALLS)
def test_writes_into_the_given_tensor_and_returns_it(op):
    functional, into, shape = CALLS[op]
    out = torch.full(shape, float("nan"))
    pointer = out.data_ptr()
    returned = into(out)
    assert out.data_ptr() == pointer and returned.data_ptr() == pointer
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
def test_fake_kernel_checks_and_returns_out(op):
    _, into, shape = CALLS[op]
    from torch._subclasses.fake_tensor import FakeTensorMode

    global X, W
    real = X, W
    with FakeTensorMode() as mode:
        X, W = mode.from_tensor(real[0]), mode.from_tensor(real[1])
        try:
            out = torch.empty(shape)
            assert into(out) is out
            with pytest.raises(RuntimeError, match=f"opforge.{op}: out"):
                into(torch.empty(*shape[:-1], shape[-1] + 1))
        finally:
            X, W = real


# Like aten's out= ops the overloads return `out` itself (Tensor(a!)); torch does not functionalize
# custom ops with aliased returns, so the AOT-dispatch checks (torch.compile) do not apply to them:
# compiled code uses the functional ops.
OUT_CHECKS = ("test_schema", "test_autograd_registration", "test_faketensor")


def test_opcheck_of_the_out_overloads():
    x, w = torch.randn(3, 2 * 8), torch.rand(2 * 8) + 0.5
    for op, args, out in [(torch.ops.opforge.swish.out, (x, 1.3), torch.empty(3, 16)),
                          (torch.ops.opforge.rms_norm.out, (x, w, 1e-5), torch.empty(3, 16)),
                          (torch.ops.opforge.swiglu.out, (x, 1.3), torch.empty(3, 8))]:
        torch.library.opcheck(op, args, {"out": out}, test_utils=OUT_CHECKS)


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
