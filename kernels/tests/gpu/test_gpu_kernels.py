"""The shared CUDA kernels (cuda.cuh) on a GPU, through their launchers (conftest.py's shim):
every op x float32/float16/bfloat16 forward and backward against float64 references at the
spec's cases, odd shapes and unaligned views; RMSNorm's dW bit for bit the same on every run;
every launch on the caller's stream; indices beyond 2^31 elements. Skipped without a GPU."""
import kernel_checks as checks
import numpy as np
import pytest

import opforge_spec as spec

# the ops of a launcher family whose outputs are X's (the GPU shim runs their kernels by family); the
# quantized rows' families (outputs of their own dtypes) have their own tests (torch_ext's
# test_rms_norm_quant.py and test_numerics on CUDA)
OPS = [op for op in spec.OPS.values() if op.family is not None and op.family not in spec.QUANT_FAMILIES]
OP_IDS = [op.name for op in OPS]


@pytest.mark.parametrize("view", list(checks.VIEWS))
@pytest.mark.parametrize("dtype", checks.DTYPES)
@pytest.mark.parametrize("op", OPS, ids=OP_IDS)
def test_forward_matches_the_spec_cases(gpu, op, dtype, view):
    checks.check_spec_cases(gpu, op, dtype, view)


@pytest.mark.parametrize("view", list(checks.VIEWS))
@pytest.mark.parametrize("dtype", checks.DTYPES)
@pytest.mark.parametrize("op", OPS, ids=OP_IDS)
def test_forward_matches_the_reference_on_every_launch_path(gpu, op, dtype, view):
    checks.check_launch_paths(gpu, op, dtype, view)


@pytest.mark.parametrize("view", list(checks.VIEWS))
@pytest.mark.parametrize("dtype", checks.DTYPES)
@pytest.mark.parametrize("op", OPS, ids=OP_IDS)
def test_backward_matches_the_float64_gradient(gpu, op, dtype, view):
    checks.check_backward(gpu, op, dtype, view)


def test_rms_norm_backward_of_no_rows_gives_zero_dw(gpu):
    checks.check_rms_norm_backward_of_no_rows(gpu)


WEIGHTED = [op for op in OPS if "W" in op.inputs]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("op", WEIGHTED, ids=[op.name for op in WEIGHTED])
def test_float32_weight_beside_a_16_bit_x(gpu, op, dtype):
    checks.check_float32_weight(gpu, op, dtype)


@pytest.mark.parametrize("dtype", checks.DTYPES)
@pytest.mark.parametrize("shape", [(4099, 1031), (2048, 4096), (64, 20_000), (3, 8)],
                         ids=checks.shape_id)
def test_rms_norm_backward_is_bitwise_reproducible(gpu, dtype, shape):
    """dW sums up to 512 row groups' partial rows in a fixed order: no atomics, the same bits on
    every run (bit-exact alignment, torch's deterministic mode)."""
    x, w = checks.random_inputs(spec.RMS_NORM, shape, dtype, seed=3)
    dy = spec.round_to(dtype, np.random.default_rng(4).standard_normal(shape))
    runs = [gpu.run("RMSNorm", dtype, x, w, dy, backward=True, raw=True) for _ in range(3)]
    for dx, dw in runs[1:]:
        assert dw.tobytes() == runs[0][1].tobytes(), "dW differs between runs"
        assert dx.tobytes() == runs[0][0].tobytes(), "dX differs between runs"


LAUNCHES = [(op, backward) for op in OP_IDS for backward in (False, True)]
LAUNCH_IDS = [f"{op}-{'bwd' if backward else 'fwd'}" for op, backward in LAUNCHES]
VERDICTS = {1: "ran before its stream was released", 2: "never ran",
            3: "blocked the host (it synchronized)"}


@pytest.mark.parametrize("dtype", checks.DTYPES)
@pytest.mark.parametrize("op, backward", LAUNCHES, ids=LAUNCH_IDS)
def test_every_launch_waits_for_the_callers_stream(gpu, op, backward, dtype):
    """The stream handed to the launcher is held by a host function while the outputs are read
    from another stream: nothing may have run (a launch on a default stream would have), nothing
    may block the host (a synchronizing launcher would), and after release everything ran."""
    shapes = [(3, 4096), (2, 70_002)] + ([(0, 64)] if op == "RMSNorm" and backward else [])
    for rows, cols in shapes:
        verdict = gpu.stream_order(op, dtype, rows, cols, backward)
        assert verdict == 0, f"{rows}x{cols}: {VERDICTS.get(verdict, verdict)}"


def test_a_launch_on_the_default_stream_would_be_caught(gpu):
    assert gpu.stream_order("Swish", "float32", 4, 64, control=True) == 1


# ---- beyond 2^31 elements: float16 tensors filled on the device ---------------------------

def pattern(index, modulus, base=0.0):
    """gpu_shim.cu's fill_pattern, rounded to float16 the same way."""
    values = np.float32(base) + ((index % modulus) - modulus // 2).astype(np.float32) / np.float32(1024)
    return values.astype(np.float32).astype(np.float16).astype(np.float64)


LARGE = {  # (op, backward): (rows, cols) with rows * cols > 2^31
    ("Swish", False): ((1 << 21) + 1, 1024), ("Swish", True): ((1 << 21) + 1, 1024),
    ("SwiGLU", False): ((1 << 20) + 1, 2 * 1025), ("SwiGLU", True): ((1 << 20) + 1, 2 * 1024),
    ("RMSNorm", False): ((1 << 19) + 1, 4096), ("RMSNorm", True): ((1 << 19) + 1, 4096),
}


@pytest.mark.parametrize("op, backward", list(LARGE),
                         ids=[f"{o}-{'bwd' if b else 'fwd'}" for o, b in LARGE])
def test_indices_beyond_2_pow_31_elements(gpu, op, backward):
    rows, cols = LARGE[(op, backward)]
    samples = [0, 1, rows // 2, rows - 2, rows - 1]  # the last rows lie past 2^31 elements
    got = gpu.large(op, rows, cols, samples, backward)
    if got is None:
        pytest.skip(f"this GPU has not the memory for {rows} x {cols} float16 tensors")
    first = np.asarray(samples, np.int64)[:, None]
    x, w = pattern(first * cols + np.arange(cols), 8191), pattern(np.arange(cols), 7, 1.0)
    dy_cols = cols // 2 if op == "SwiGLU" else cols
    dy = pattern(first * dy_cols + np.arange(dy_cols), 509)
    spec_op = spec.OPS[op]
    if backward:
        want, _, scale, _ = checks.backward_reference(spec_op, x, w, dy)
        checks.assert_gradient_close(got, want, scale, spec_op, "float16", f"{op} rows {samples}")
    else:
        inputs = (x, w) if op == "RMSNorm" else (x,)
        spec_op.check_close(got, spec_op.reference(*inputs), "float16", inputs, f"rows {samples}")
