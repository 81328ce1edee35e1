"""Every opforge op of the spec in ONNX Runtime against opforge_spec's float64 references."""
from __future__ import annotations

import threading

import numpy as np
import pytest
from onnx import helper
from ort_models import (
    check_residual_stream,
    initializer,
    make_model,
    opforge_node,
    opsets,
    output_dtype,
    output_shapes,
    random_inputs,
    residual_stream_model,
    result,
    served,
    session,
    single_op_model,
    value_info,
)

import opforge_ort
import opforge_spec as spec

CPU_DTYPES = ("float32", "float64", "bfloat16")


def _cases():
    """Every op of the spec, every CPU dtype, every case; W as a graph input and as an initializer."""
    return [pytest.param(op, dtype, case, w_source, id=f"{op.name}-{dtype}-{case.name}-W_{w_source}")
            for op in spec.OPS.values() for dtype in CPU_DTYPES for case in op.cases(dtype)
            for w_source in (("input", "initializer") if "W" in op.inputs else ("input",))]


def _feed(array, dtype, non_contiguous=False):
    a = np.asarray(array, dtype=np.float32 if dtype == "bfloat16" else dtype)
    return spec.strided(a) if non_contiguous else a


@pytest.mark.parametrize("op,dtype,case,w_source", _cases())
def test_matches_reference(op, dtype, case, w_source):
    inputs = dict(zip(op.inputs, case.inputs))
    baked = np.asarray(inputs["W"]) if w_source == "initializer" else None
    model = single_op_model(op.name, dtype, np.ndim(inputs["X"]), w_as_initializer=baked, **case.attrs)
    if not served(op.name, case.attrs):
        return check_unserved_dtype_refused(op, model, case.attrs)
    sess = session(model)
    feeds = {name: _feed(a, dtype, case.non_contiguous and name != "W") for name, a in inputs.items()
             if not (name == "W" and baked is not None)}
    outputs = sess.run(None, feeds)
    assert [o.shape for o in outputs] == output_shapes(op.name, np.shape(inputs["X"]))
    op.check_close(result(op.name, outputs), op.reference(*case.inputs, **case.attrs), dtype, (inputs["X"],),
                   case.name, attrs=case.attrs)


def check_unserved_dtype_refused(op, model: bytes, attrs: dict) -> None:
    """An output dtype ORT's custom-op API cannot serve (an attribute picks another than the one
    registered): ORT itself refuses the graph's declared type, and opforge_ort.check_model names
    the attribute before any session."""
    with pytest.raises(Exception, match=r"Type Error: Type .* of output arg .* does not match expected type"):
        session(model)
    with pytest.raises(opforge_ort.models.ModelError, match=rf"opforge\.{op.name}: .*custom-op API"):
        opforge_ort.check_model(model)


def test_swiglu_default_beta_is_the_specs():
    x = np.random.default_rng(3).standard_normal((3, 2 * 6)).astype(np.float32)
    (y,) = session(single_op_model("SwiGLU", "float32", 2)).run(None, {"X": x})
    spec.SWIGLU.check_close(y, spec.SWIGLU.reference(x, **spec.SWIGLU.defaults()), "float32", (x,))


# ---- a chain: Swish(beta) -> standard ops -> RMSNorm ---------------------------------------------

BETA, EPS, SCALE = 1.7, 1e-5, 0.5


def chain_model(rank: int, opset: int, w_source: str, w: np.ndarray) -> bytes:
    """Y = RMSNorm(X + SCALE * Swish(X, BETA), W, EPS), all dims dynamic."""
    nodes = [
        opforge_node("Swish", ["X"], ["S"], name="swish", beta=BETA),
        helper.make_node("Mul", ["S", "scale"], ["T"], name="scale"),
        helper.make_node("Add", ["X", "T"], ["U"], name="residual"),
        opforge_node("RMSNorm", ["U", "W"], ["Y"], name="rms", epsilon=EPS),
    ]
    inputs = [value_info("X", "float32", rank)]
    inits = [initializer("scale", np.array(SCALE, np.float32))]
    if w_source == "initializer":
        inits.append(initializer("W", w.astype(np.float32)))
    else:
        inputs.append(value_info("W", "float32", 1, prefix="c"))
    return make_model(nodes, inputs, [value_info("Y", "float32", rank)], inits, opset=opset)


def chain_reference(x, w):
    x = np.asarray(x, np.float64)
    u = x + SCALE * spec.SWISH.reference(x, beta=BETA)
    return spec.RMS_NORM.reference(u, w, epsilon=EPS)


def chain_inputs(rng):
    """(name, X) pairs covering ranks 2-4, empty tensors, zero rows, +-1e4 and NaN."""
    zero_rows = rng.standard_normal((4, 24))
    zero_rows[[0, 2]] = 0.0
    huge = rng.choice([-1e4, 1e4], (3, 16))
    nan = rng.standard_normal((2, 3, 8))
    nan[1, 2, 5] = np.nan
    return [
        ("rank2", rng.standard_normal((5, 32))),
        ("rank3", rng.standard_normal((2, 7, 48))),
        ("rank4", rng.standard_normal((2, 3, 4, 16))),
        ("rank4_wide", rng.standard_normal((1, 2, 64, 1031))),  # enough work for the thread pool
        ("zero_rows", zero_rows),
        ("pm_1e4", huge),
        ("nan", nan),
        ("empty_rows", np.zeros((0, 16))),
        ("empty_rank3", np.zeros((3, 0, 16))),
        ("empty_rank4", np.zeros((2, 0, 5, 16))),
    ]


@pytest.mark.parametrize("w_source", ["initializer", "input"])
@pytest.mark.parametrize("opset", opsets())
def test_chain_matches_reference(opset, w_source):
    rng = np.random.default_rng(7)
    per_rank = {}  # W as graph input: one session per rank serves every shape (dynamic dims)
    for name, given in chain_inputs(rng):
        x = given.astype(np.float32)
        w = rng.uniform(0.5, 1.5, x.shape[-1]).astype(np.float32)
        if w_source == "initializer":
            sess = session(chain_model(x.ndim, opset, w_source, w))
        else:
            if x.ndim not in per_rank:
                per_rank[x.ndim] = session(chain_model(x.ndim, opset, w_source, w))
            sess = per_rank[x.ndim]
        feeds = {"X": x} if w_source == "initializer" else {"X": x, "W": w}
        (y,) = sess.run(None, feeds)
        assert y.shape == x.shape and y.dtype == np.float32
        # RMSNorm's tolerance: the fp32 Swish/Mul/Add before it round once each (~1e-7 relative).
        spec.RMS_NORM.check_close(y, chain_reference(x, w), "float32", (x,), f"chain {name}")


def test_chain_session_reused_across_shapes():
    """One session (dynamic dims), inputs of different shapes and ranks' sizes in turn."""
    rng = np.random.default_rng(3)
    w = rng.uniform(0.5, 1.5, 16).astype(np.float32)
    sess = session(chain_model(3, 17, "input", w))
    for shape in [(1, 1, 16), (4, 9, 16), (0, 2, 16), (2, 0, 16), (7, 3, 16)]:
        x = rng.standard_normal(shape).astype(np.float32)
        (y,) = sess.run(None, {"X": x, "W": w})
        spec.RMS_NORM.check_close(y, chain_reference(x, w), "float32", (x,), f"shape {shape}")


# ---- the residual stream: AddRMSNorm's H feeds the next AddRMSNorm --------------------------------

@pytest.mark.parametrize("opset", opsets())
def test_residual_stream_matches_reference(opset):
    """Two chained AddRMSNorm nodes (H1 is the second's residual), one session per rank serving
    every shape, against the float64 composition of the spec's references."""
    rng = np.random.default_rng(13)
    per_rank = {}
    for name, x in chain_inputs(rng):
        if x.ndim not in per_rank:
            per_rank[x.ndim] = session(residual_stream_model(x.ndim, opset=opset))
        d = x.shape[-1]
        feeds = {"X": x.astype(np.float32), "R": rng.standard_normal(x.shape).astype(np.float32),
                 "W1": rng.uniform(0.5, 1.5, d).astype(np.float32), "W2": rng.uniform(0.5, 1.5, d).astype(np.float32)}
        outputs = per_rank[x.ndim].run(None, feeds)
        assert [o.shape for o in outputs] == [x.shape] * 4
        check_residual_stream(outputs, feeds, "float32", f"residual stream {name}")


# ---- threads -------------------------------------------------------------------------------------

def test_same_session_from_8_threads_gives_identical_results():
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 4, 64, 257)).astype(np.float32)  # > one chunk: ORT's pool splits it
    w = rng.uniform(0.5, 1.5, 257).astype(np.float32)
    sess = session(chain_model(4, 17, "input", w), threads=2)
    (expected,) = sess.run(None, {"X": x, "W": w})
    results, errors = [], []

    def worker(seed):
        try:
            local_rng = np.random.default_rng(seed)
            for _ in range(5):
                other = local_rng.standard_normal((3, 5, 257)).astype(np.float32)  # interleave other shapes
                sess.run(None, {"X": other[None], "W": w})
                results.append(sess.run(None, {"X": x, "W": w})[0])
        except Exception as exc:  # noqa: BLE001  (any: surfaced below; a thread's exception would otherwise vanish)
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(results) == 40
    for r in results:
        np.testing.assert_array_equal(r, expected)
    spec.RMS_NORM.check_close(expected, chain_reference(x, w), "float32", (x,), "threaded")


@pytest.mark.parametrize("op", list(spec.OPS))
def test_thread_pool_split_matches_single_thread(op):
    """Chunking over the intra-op pool must give bit-identical results to one thread."""
    feeds = random_inputs(op, np.random.default_rng(5), (300,), 515)
    model = single_op_model(op, "float32", 2)
    one = session(model, threads=1).run(None, feeds)
    many = session(model, threads=2).run(None, feeds)
    assert len(one) == len(spec.OPS[op].outputs)
    for a, b in zip(one, many):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("op", list(spec.OPS))
def test_output_types_and_shapes_follow_the_spec(op):
    """Each output of X's dtype, or of its own (a fixed one, the one its attribute picks), and of
    its shape rule."""
    feeds = random_inputs(op, np.random.default_rng(2), (2, 3), 4, np.float64)
    outputs = session(single_op_model(op, "float64", 3)).run(None, feeds)
    assert [o.dtype for o in outputs] == [np.dtype(output_dtype(op, name, "float64")) for name in spec.OPS[op].outputs]
    assert [o.shape for o in outputs] == output_shapes(op, feeds["X"].shape)
    spec.OPS[op].check_close(result(op, outputs), spec.OPS[op].reference(*feeds.values()), "float64")


def test_bfloat16_output_is_bfloat16_rounded():
    """The bfloat16 kernels really run in bfloat16 (the Cast back gives bf16-representable values)."""
    x = np.array([[1.2345678, -2.3456789, 0.1]], np.float32)
    (y,) = session(single_op_model("Swish", "bfloat16", 2)).run(None, {"X": spec.round_to("bfloat16", x)})
    assert np.array_equal(spec.round_to("bfloat16", y), y)


# ---- ORT gives torch's values: the ops with outputs of their own dtype (RMSNormQuant) -------------

def _torch_op(op):
    """torch.ops.opforge.<op> of an opforge_torch that has it, else a skip."""
    torch = pytest.importorskip("torch")
    try:
        import opforge_torch  # noqa: F401  (registers torch.ops.opforge)
    except (ImportError, OSError) as err:
        pytest.skip(f"opforge_torch not importable: {err}")
    if not hasattr(torch.ops.opforge, op.torch_name):
        pytest.skip(f"this opforge_torch has no {op.torch_name}")
    return torch, getattr(torch.ops.opforge, op.torch_name)


OWN_DTYPE_CASES = [pytest.param(op, case, id=f"{op.name}-{case.name}") for op in spec.OPS.values()
                   if op.output_dtypes for case in op.cases("float32") if served(op.name, case.attrs)]


@pytest.mark.parametrize("op,case", OWN_DTYPE_CASES)
def test_outputs_of_their_own_dtype_equal_torchs(op, case):
    """Every output of an op with outputs of their own dtype (RMSNormQuant's int8 Q and float32
    scale) is torch's (opforge_torch on the CPU, the same kernels) element for element, bits too."""
    torch, torch_op = _torch_op(op)
    inputs = [np.ascontiguousarray(np.asarray(a, np.float32)) for a in case.inputs]
    attrs = {**op.defaults(), **case.attrs}
    args = [attrs[name] if op.attributes[name].kind == "float" else int(attrs[name]) for name in op.attributes]
    expected = [t.numpy() for t in torch_op(*(torch.from_numpy(a) for a in inputs), *args)]
    model = single_op_model(op.name, "float32", inputs[0].ndim, **case.attrs)
    got = session(model).run(None, dict(zip(op.inputs, inputs)))
    for name, g, e in zip(op.outputs, got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape, (name, g.dtype, e.dtype, g.shape, e.shape)
        np.testing.assert_array_equal(g.view(np.uint8), e.view(np.uint8), err_msg=f"{op.name} {case.name} {name}")
