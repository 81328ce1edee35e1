"""The CUDA kernels' own source (cuda.cuh) executed on the CPU (cuda_emulation.cc: each launch
rewritten into an emulated grid of blocks whose threads are fibers meeting at every barrier and
shuffle), checked like on a GPU (kernel_checks.py): every op x float32/float16/bfloat16 forward
against the spec's cases and float64 references on each launch path, backward against float64
gradients, at aligned and unaligned views, nothing written outside the outputs. The GPU runs the
same checks and more (gpu/)."""
import ctypes
import re
import subprocess
from pathlib import Path

import cuda_tools
import kernel_checks as checks
import numpy as np
import pytest
from cuda_harness import Kernels

import opforge_spec as spec

HERE = Path(__file__).parent
LAUNCH = re.compile(r"([\w:]+(?:<[^<>;]*>)?)\s*<<<(.*?)>>>", re.S)
MAX_ELEMENTS = 150_000  # the emulation runs a few million threads a second
# the ops of a launcher family whose outputs are X's (the harness runs their kernels by family); the
# quantized rows' families (outputs of their own dtypes) by their own launch (QUANT_OPS)
OPS = [op for op in spec.OPS.values() if op.family is not None and op.family not in spec.QUANT_FAMILIES]
QUANT_OPS = [op for op in spec.OPS.values() if op.family in spec.QUANT_FAMILIES]
# an offset-by-one output takes the same (scalar) kernels as an offset-by-one input alone
VIEWS = [v for v in checks.VIEWS if v != "all_off_by_one"]


def build(folder: Path) -> str:
    cuda_include = cuda_tools.toolkit_include()
    if cuda_include is None:
        return ""
    (folder / "opforge" / "kernels").mkdir(parents=True)
    for name in ("cuda.cuh", "quant_rows_cuda.cuh"):  # the launchers' headers, found before the originals
        source = (spec.include_dir() / "opforge" / "kernels" / name).read_text()
        emulated, launches = LAUNCH.subn(r"emulated_launch(\1, \2)", source)
        assert launches == source.count("<<<") > 0, f"a launch the rewrite does not recognize in {name}"
        (folder / "opforge" / "kernels" / name).write_text(emulated)
    out = folder / "libopforge_emulation.so"
    done = subprocess.run(["g++", "-std=c++17", "-O2", "-shared", "-fPIC", f"-I{folder}",
                           f"-I{spec.include_dir()}", "-isystem", str(cuda_include),
                           str(HERE / "cuda_emulation.cc"), "-o", str(out)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-4000:]
    return str(out)


@pytest.fixture(scope="module")
def emulated(run_once) -> Kernels:
    built = run_once("cuda_emulation", build)
    if not built:
        pytest.skip("no CUDA toolkit headers (set OPFORGE_CUDA_HOME): the kernels are not emulated")
    return Kernels(ctypes.CDLL(built))


@pytest.mark.parametrize("view", VIEWS)
@pytest.mark.parametrize("dtype", checks.DTYPES)
@pytest.mark.parametrize("op", OPS, ids=[op.name for op in OPS])
def test_forward_matches_the_spec_cases(emulated, op, dtype, view):
    checks.check_spec_cases(emulated, op, dtype, view)


@pytest.mark.parametrize("view", VIEWS)
@pytest.mark.parametrize("dtype", checks.DTYPES)
@pytest.mark.parametrize("op", OPS, ids=[op.name for op in OPS])
def test_forward_matches_the_reference_on_every_launch_path(emulated, op, dtype, view):
    checks.check_launch_paths(emulated, op, dtype, view, MAX_ELEMENTS)


@pytest.mark.parametrize("view", VIEWS)
@pytest.mark.parametrize("dtype", checks.DTYPES)
@pytest.mark.parametrize("op", OPS, ids=[op.name for op in OPS])
def test_backward_matches_the_float64_gradient(emulated, op, dtype, view):
    checks.check_backward(emulated, op, dtype, view, MAX_ELEMENTS)


def test_rms_norm_backward_of_no_rows_gives_zero_dw(emulated):
    checks.check_rms_norm_backward_of_no_rows(emulated)


WEIGHTED = [op for op in OPS if "W" in op.inputs]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("op", WEIGHTED, ids=[op.name for op in WEIGHTED])
def test_float32_weight_beside_a_16_bit_x(emulated, op, dtype):
    checks.check_float32_weight(emulated, op, dtype, MAX_ELEMENTS)


@pytest.mark.parametrize("dtype", checks.DTYPES)
@pytest.mark.parametrize("op", QUANT_OPS, ids=[op.name for op in QUANT_OPS])
def test_quantized_rows_match_the_spec_cases(emulated, op, dtype):
    """Q within one quantization step of the reference, Scale and H within the spec's tolerances,
    nothing written outside them (the float32 block sums as on a GPU)."""
    for case in op.cases(dtype):
        got = emulated.run_quant(op.name, dtype, case.inputs, case.attrs)
        op.check_close(got, op.reference(*case.inputs, **case.attrs), dtype, case.inputs, case.name, case.attrs)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("op", QUANT_OPS, ids=[op.name for op in QUANT_OPS])
def test_quantized_rows_with_a_float32_weight_are_the_float32_computation(emulated, op, dtype):
    """A float32 W beside a 16-bit X: Q and Scale are the float32 call's on X's (and H's) values,
    bit for bit; a W rounded to X's dtype gives other scales."""
    inputs = checks.random_inputs(op, (8, 1031), dtype)
    named = dict(zip(op.inputs, inputs))
    named["W"] = spec.round_to("float32", np.random.default_rng(1).uniform(0.5, 1.5, 1031))
    mixed = emulated.run_quant(op.name, dtype, tuple(named[n] for n in op.inputs), {}, w_float32=True)
    if "R" in named:  # the float32 call on the H the mixed one normalized
        named = {**named, "X": mixed[2], "R": np.zeros_like(mixed[2])}
    twin = emulated.run_quant(op.name, "float32", tuple(named[n] for n in op.inputs), {})
    for got, want in zip(mixed[:2], twin[:2]):
        np.testing.assert_array_equal(got, want, err_msg=f"opforge.{op.name} {dtype} X, float32 W")
    named["W"] = spec.round_to(dtype, named["W"])
    rounded = emulated.run_quant(op.name, "float32", tuple(named[n] for n in op.inputs), {})
    assert not np.array_equal(rounded[1], twin[1]), "rounding W would not show here"
