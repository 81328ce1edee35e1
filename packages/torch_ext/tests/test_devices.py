"""Tensors on two devices are refused, naming the op, the input and the device expected.

With a CPU input and a meta weight the dispatcher picks the meta (fake) kernel, which used to
return uninitialized memory as the result. Every tensor argument of every op and backward op is
checked in the fake kernels (eager meta dispatch, torch.compile, torch.export) and in the C++
kernels (reached here by redispatching to the CPU kernel, as no GPU is needed for that).
"""

import pytest
import torch

import opforge_spec as spec
import opforge_torch

OPS = torch.ops.opforge


def _x(device="cpu"):
    torch.manual_seed(0)  # every device's generator
    return torch.randn(2, 8, device=device)


def _w(device="cpu"):
    return torch.ones(8, device=device)


# (op, builder of the arguments, the input named in the error, the device expected for it)
MIXED = [
    (OPS.rms_norm.default, lambda: (_x(), _w("meta"), 1e-6), "RMSNorm", "W", "cpu", "meta"),
    (OPS.rms_norm.default, lambda: (_x("meta"), _w(), 1e-6), "RMSNorm", "W", "meta", "cpu"),
    (OPS.swish_backward.default, lambda: (_x("meta"), _x(), 1.0), "Swish", "dY", "cpu", "meta"),
    (OPS.swish_backward.default, lambda: (_x(), _x("meta"), 1.0), "Swish", "dY", "meta", "cpu"),
    (OPS.rms_norm_backward.default, lambda: (_x("meta"), _x(), _w(), 1e-6),
     "RMSNorm", "dY", "cpu", "meta"),
    (OPS.rms_norm_backward.default, lambda: (_x(), _x("meta"), _w("meta"), 1e-6),
     "RMSNorm", "dY", "meta", "cpu"),
    (OPS.rms_norm_backward.default, lambda: (_x(), _x(), _w("meta"), 1e-6),
     "RMSNorm", "W", "cpu", "meta"),
    (OPS.rms_norm_backward.default, lambda: (_x("meta"), _x("meta"), _w(), 1e-6),
     "RMSNorm", "W", "meta", "cpu"),
    (OPS.add_rms_norm.default, lambda: (_x(), _x("meta"), _w(), 1e-6), "AddRMSNorm", "R", "cpu", "meta"),
    (OPS.add_rms_norm.default, lambda: (_x("meta"), _x(), _w("meta"), 1e-6),
     "AddRMSNorm", "R", "meta", "cpu"),
    (OPS.add_rms_norm.default, lambda: (_x(), _x(), _w("meta"), 1e-6), "AddRMSNorm", "W", "cpu", "meta"),
    (OPS.add_rms_norm_backward.default, lambda: (_x(), _x("meta"), _x(), _x(), _w(), 1e-6),
     "AddRMSNorm", "dH", "cpu", "meta"),
    (OPS.add_rms_norm_backward.default, lambda: (_x(), _x(), _x(), _x("meta"), _w(), 1e-6),
     "AddRMSNorm", "R", "cpu", "meta"),
]
IDS = [f"{op._opname}-{name}-{got}-with-X-{want}" for op, _, _, name, want, got in MIXED]


def _message(op_name, name, want, got):
    return spec.error(op_name, name, f"a tensor on {want} (device of X)", got)


@pytest.mark.parametrize("op,args,op_name,name,want,got", MIXED, ids=IDS)
def test_eager_call_refuses_mixed_devices(op, args, op_name, name, want, got):
    with pytest.raises(RuntimeError) as info:
        op(*args())
    assert _message(op_name, name, want, got) in str(info.value)


@pytest.mark.parametrize("op,args,op_name,name,want,got", MIXED, ids=IDS)
def test_torch_compile_sees_the_same_error(op, args, op_name, name, want, got):
    torch._dynamo.reset()
    values = args()
    with pytest.raises(RuntimeError) as info:
        torch.compile(op, fullgraph=True, backend="eager")(*values)
    assert _message(op_name, name, want, got) in str(info.value)


@pytest.mark.parametrize("op,args,op_name,name,want,got", MIXED, ids=IDS)
def test_cpu_kernel_refuses_mixed_devices(op, args, op_name, name, want, got):
    """The C++ check itself: the CPU kernel called directly with a meta tensor among its inputs."""
    cpu = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
    with pytest.raises(RuntimeError) as info:
        op.redispatch(cpu, *args())
    assert _message(op_name, name, want, got) in str(info.value)


def test_cpu_kernel_refuses_a_meta_input():
    cpu = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
    with pytest.raises(RuntimeError) as info:
        OPS.swish.default.redispatch(cpu, _x("meta"), 1.0)
    assert spec.error("Swish", "X", "a tensor on cpu", "meta") in str(info.value)


def test_autograd_of_mixed_devices_refuses_before_any_kernel():
    x = _x().requires_grad_()
    with pytest.raises(RuntimeError, match=r"opforge\.RMSNorm: W: expected a tensor on cpu"):
        opforge_torch.rms_norm(x, _w("meta").requires_grad_(), 1e-6)


def test_all_meta_is_shape_inference():
    y = opforge_torch.rms_norm(_x("meta"), _w("meta"), 1e-6)
    assert y.device.type == "meta" and y.shape == (2, 8)
    dx, dw = OPS.rms_norm_backward(_x("meta"), _x("meta"), _w("meta"), 1e-6)
    assert dx.shape == (2, 8) and dw.shape == (8,)
    assert opforge_torch.swish(_x("meta").half()).dtype == torch.float16  # any backend's dtype
    y, h = opforge_torch.add_rms_norm(_x("meta"), _x("meta"), _w("meta"), 1e-6)
    assert y.shape == h.shape == (2, 8) and y.device.type == h.device.type == "meta"
    dx, dr, dw = OPS.add_rms_norm_backward(_x("meta"), _x("meta"), _x("meta"), _x("meta"), _w("meta"), 1e-6)
    assert dx.shape == dr.shape == (2, 8) and dw.shape == (8,)


FAKE_AND_REAL = [
    lambda: opforge_torch.swish(torch.ones(3, dtype=torch.int64)),
    lambda: opforge_torch.swish(torch.ones(3, dtype=torch.float16)),
    lambda: opforge_torch.rms_norm(torch.ones(2, 8), torch.ones(4)),
    lambda: opforge_torch.rms_norm(torch.ones(2, 8), torch.ones(1, 8)),
    lambda: opforge_torch.rms_norm(torch.ones(2, 8), _w().double()),
    lambda: opforge_torch.rms_norm(torch.tensor(1.0), _w()),
    lambda: OPS.swish_backward(torch.ones(3), _x(), 1.0),
    lambda: OPS.swish_backward(_x().double(), _x(), 1.0),
    lambda: OPS.rms_norm_backward(_x().double(), _x(), _w(), 1e-6),
    lambda: OPS.rms_norm_backward(torch.ones(2, 4), _x(), _w(), 1e-6),
    lambda: opforge_torch.add_rms_norm(_x(), torch.ones(2, 7), _w()),
    lambda: opforge_torch.add_rms_norm(_x(), torch.ones(1, 8), _w()),
    lambda: opforge_torch.add_rms_norm(_x(), torch.ones(8), _w()),
    lambda: opforge_torch.add_rms_norm(_x(), _x().double(), _w()),
    lambda: opforge_torch.add_rms_norm(_x(), _x(), torch.ones(4)),
    lambda: OPS.add_rms_norm_backward(_x(), torch.ones(2, 4), _x(), _x(), _w(), 1e-6),
    lambda: OPS.add_rms_norm_backward(_x(), _x().double(), _x(), _x(), _w(), 1e-6),
    lambda: OPS.add_rms_norm_backward(_x(), _x(), _x(), torch.ones(1, 8), _w(), 1e-6),
]


@pytest.mark.parametrize("call", FAKE_AND_REAL, ids=[
    "int64", "float16-cpu", "w-length", "w-rank", "w-dtype", "rank0", "dy-shape", "dy-dtype",
    "rms-dy-dtype", "rms-dy-shape", "r-shape", "r-broadcast", "r-rank", "r-dtype", "add-w-length",
    "dh-shape", "dh-dtype", "backward-r-broadcast"])
def test_fake_kernels_refuse_what_the_cpu_kernels_refuse(call):
    """Same text from the C++ kernel (real tensors) and the fake kernel (fake CPU tensors)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with pytest.raises(RuntimeError) as real:
        call()
    with FakeTensorMode(), pytest.raises(RuntimeError) as fake:
        call()
    assert str(real.value).startswith("opforge.")
    assert str(fake.value).split("\n")[0] == str(real.value).split("\n")[0]


def test_meta_refuses_integer_input():
    with pytest.raises(RuntimeError, match=r"opforge\.Swish: X: expected float32, .* got int64"):
        opforge_torch.swish(torch.ones(3, dtype=torch.int64, device="meta"))


@pytest.mark.parametrize("case", [c for op in spec.OPS.values() for c in op.bad_cases()],
                         ids=lambda c: c.name)
def test_spec_bad_cases_fail_alike_under_torch_compile(case):
    op = spec.OPS[case.mentions[0].removeprefix("opforge.")]
    fn = getattr(OPS, op.torch_name)
    attrs = [case.attrs.get(k, a.default) for k, a in op.attributes.items()]
    inputs = [torch.from_numpy(a) for a in case.inputs]
    with pytest.raises(RuntimeError) as eager:
        fn(*inputs, *attrs)
    torch._dynamo.reset()
    with pytest.raises(RuntimeError) as compiled:
        torch.compile(lambda *t: fn(*t, *attrs), fullgraph=True, backend="eager")(*inputs)
    assert str(eager.value).split("\n")[0] in str(compiled.value)
