"""Under torch.compile(dynamic=True) the fake kernels refuse bad input with eager's text: sizes, not
the symbols standing for them (`got shape [1, 16]`, not `got shape [1, s21]`)."""

import numpy as np
import pytest
import torch

import opforge_spec as spec
import opforge_torch
from opforge_torch._checks import out_names


def _bad_calls():
    for op in spec.OPS.values():
        for case in op.bad_cases():
            if all(np.asarray(a).dtype == np.float32 and np.ndim(a) >= 1 for a in case.inputs):
                yield pytest.param(op, case, id=f"{op.name}-{case.name}")


def _eager_message(fn, *args):
    with pytest.raises(RuntimeError) as info:
        fn(*args)
    (line,) = str(info.value).splitlines()
    return line


def _compiled_error(fn, *args):
    torch._dynamo.reset()
    with pytest.raises(RuntimeError) as info:  # torch wraps the kernel's error in its own
        torch.compile(fn, dynamic=True, fullgraph=True)(*args)
    return str(info.value)


@pytest.mark.parametrize("op,case", list(_bad_calls()))
def test_a_bad_call_under_dynamic_shapes_has_the_eager_text(op, case):
    call = getattr(opforge_torch, op.torch_name)
    attrs = {**op.defaults(), **case.attrs}

    def fn(*inputs):
        return call(*inputs, *attrs.values())

    inputs = tuple(torch.from_numpy(np.asarray(a)) for a in case.inputs)
    message = _eager_message(fn, *inputs)
    assert message in _compiled_error(fn, *inputs)


@pytest.mark.parametrize("op", list(spec.OPS.values()), ids=lambda op: op.name)
def test_a_wrong_out_under_dynamic_shapes_has_the_eager_text(op):
    call = getattr(opforge_torch, op.torch_name)
    x = torch.randn(3, 4 * op.split, generator=torch.Generator().manual_seed(0))
    inputs = tuple(torch.ones(4) if name == "W" else x.clone() for name in op.inputs)
    shapes = [op.output_shape_of(name, x.shape) for name in op.outputs]
    dtypes = [getattr(torch, op.output_dtype(name, "float32")) for name in op.outputs]
    outs = tuple(torch.zeros(s[0] + 2, s[1], dtype=d) for s, d in zip(shapes, dtypes))  # two rows too many each

    def fn(*tensors):
        count = len(op.inputs)
        call(*tensors[:count], out=tensors[count:] if len(outs) > 1 else tensors[count])

    message = _eager_message(fn, *inputs, *outs)
    assert message.startswith(f"opforge.{op.name}: {out_names(op)[0]}: expected shape [3, ")
    assert message in _compiled_error(fn, *inputs, *outs)
