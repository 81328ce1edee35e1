"""The opforge operators, defined once: names, attributes, float64 references, tolerances and the
input cases every layer (torch, ONNX Runtime, TensorRT, loader plugins) is tested on."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .numerics import Errors, describe_worst, dtype_name, measure, round_to

DOMAIN = "opforge"
DOMAIN_VERSION = 1


def error(op_name: str, what: str, expected: str, got: str) -> str:
    """The canonical error text every layer uses for bad input."""
    return f"opforge.{op_name}: {what}: expected {expected}, got {got}"


def format_number(value: float) -> str:
    """A number as the C++ layers print it (printf "%.9g": round-trips every float32)."""
    return format(value, ".9g")


# Attributes are float32: a value must stay finite once rounded to float32. 2**128 - 2**103 is the
# midpoint between float32's max and 2**128; it and everything above round to inf. The C++ twin is
# kernels/include/opforge/kernels/attrs.h.
FLOAT32_OVERFLOW = 2.0**128 - 2.0**103
RANK_AT_LEAST_1 = "a tensor of rank >= 1"
# A residual input R: RESIDUAL_EXPECTED + <X's shape> + " (the shape of X)"
RESIDUAL_EXPECTED = "a tensor of shape "
# A per-column weight W: WEIGHT_EXPECTED[0] + <last dim of X> + WEIGHT_EXPECTED[1]
WEIGHT_EXPECTED = ("1-D tensor of length ", " (last dim of X)")


def _shape_text(shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def finite_in_float32(value: float) -> bool:
    return abs(value) < FLOAT32_OVERFLOW


@dataclass(frozen=True)
class Attr:
    name: str
    default: float
    doc: str
    check: Callable[[float], str | None]  # returns the expectation text when the value is invalid

    def error(self, op_name: str, value: float) -> str | None:
        """The canonical error text for `value`, or None when it is valid."""
        expected = self.check(value)
        return None if expected is None else error(op_name, self.name, expected, format_number(value))


def _finite(value: float) -> str | None:
    return None if finite_in_float32(value) else "a finite float32"


def _finite_non_negative(value: float) -> str | None:
    return None if finite_in_float32(value) and value >= 0 else "a finite float32 >= 0"


@dataclass
class Case:
    name: str
    inputs: tuple
    attrs: dict
    non_contiguous: bool = False  # layers that take strided tensors feed `strided(x)` views

    def __repr__(self) -> str:
        shapes = ", ".join(str(list(np.shape(x))) for x in self.inputs)
        return f"Case({self.name}: {shapes} {self.attrs})"


@dataclass
class BadCase:
    name: str
    inputs: tuple
    attrs: dict
    mentions: tuple  # substrings the error message must contain (op name, input/attr name)


def strided(a: np.ndarray) -> np.ndarray:
    """A non-contiguous view holding the same values as `a` (every other element of a wider array)."""
    a = np.asarray(a)
    if a.ndim == 0:
        return a
    wide = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), dtype=a.dtype)
    wide[..., ::2] = a
    return wide[..., ::2]


@dataclass
class OpSpec:
    name: str
    torch_name: str
    inputs: tuple
    attributes: dict
    reference_impl: Callable
    tolerances: dict  # dtype name -> (rtol, atol)
    case_builder: Callable
    bad_case_builder: Callable
    doc: str = ""
    outputs: tuple = ("Y",)
    extra: dict = field(default_factory=dict)
    # The shape rule every layer applies and derives its kernel calls from:
    # layout "elementwise": any shape, one call over all elements; "rows": X (rank >= 1) is
    # processed as rows of its last axis, and a second input W is a 1-D per-column weight.
    # split k > 1: X's last axis holds k equal parts (non-empty), Y's last axis is one part.
    layout: str = "elementwise"
    split: int = 1
    # The op written with standard torch tensor methods (no torch import here): what align
    # compares opforge_torch against and what bench times as the composed form.
    composed: Callable | None = None
    # A second float64 numpy formula, written unlike reference_impl on purpose: the reference
    # evaluator's independent opinion on what an exported graph means (opforge-align's refeval).
    independent: Callable | None = None
    # The op in standard ONNX ops (opsets 13..21), written once for both of torch's exporters:
    # decomposed(e, *inputs, attribute) -> output, where the emitter `e` gives
    #   e.op(op_type, *inputs, **attributes)  a standard node (int, float, str or int-list
    #                                         attributes);
    #   e.scalar(value, like)                 a scalar constant of `like`'s type;
    #   e.ints(values)                        a 1-D int64 constant;
    #   e.reduce_mean(x, axes)                ReduceMean keeping dims (axes: an attribute below
    #                                         opset 18, an input from 18);
    #   e.tiny(like)                          the smallest normal number, of `like`'s type.
    decomposed: Callable | None = None

    def x_error(self, shape) -> str | None:
        """The shape rule of X, as every layer words it; None when `shape` is valid."""
        shape = tuple(shape)
        if self.split > 1:
            if len(shape) >= 1 and shape[-1] >= self.split and shape[-1] % self.split == 0:
                return None
            got = "rank 0" if not shape else "shape [" + ", ".join(str(d) for d in shape) + "]"
            return error(self.name, "X", self.extra["x_expected"], got)
        if self.layout == "rows" and not shape:
            return error(self.name, "X", RANK_AT_LEAST_1, "rank 0")
        return None

    def r_error(self, x_shape, r_shape) -> str | None:
        """The rule of a residual input R (X's shape), as every layer words it; None when valid."""
        x_shape, r_shape = tuple(x_shape), tuple(r_shape)
        if r_shape == x_shape:
            return None
        return error(self.name, "R", RESIDUAL_EXPECTED + _shape_text(x_shape) + " (the shape of X)",
                     "shape " + _shape_text(r_shape))

    def output_shape(self, shape) -> tuple:
        """Y's shape for X's shape (a second output H has X's shape)."""
        shape = tuple(shape)
        return shape[:-1] + (shape[-1] // self.split,) if self.split > 1 else shape

    def defaults(self) -> dict:
        return {k: a.default for k, a in self.attributes.items()}

    def reference(self, *arrays, **attrs) -> np.ndarray:
        # Attributes are float32 in ONNX (AttributeProto.f) and in every kernel.
        values = {k: float(np.float32(v)) for k, v in {**self.defaults(), **attrs}.items()}
        with np.errstate(all="ignore"):
            return self.reference_impl(*(np.asarray(a, dtype=np.float64) for a in arrays), **values)

    def tolerance(self, dtype) -> tuple:
        return self.tolerances[dtype_name(dtype)]

    def cases(self, dtype, rng: np.random.Generator | None = None) -> list:
        rng = rng if rng is not None else np.random.default_rng(20261129)
        name = dtype_name(dtype)
        built = self.case_builder(rng, name)
        return [Case(c.name, tuple(round_to(name, x) for x in c.inputs), c.attrs, c.non_contiguous)
                for c in built]

    def bad_cases(self) -> list:
        return self.bad_case_builder()

    def errors(self, actual, expected64, dtype) -> Errors:
        rtol, atol = self.tolerance(dtype)
        return measure(actual, expected64, dtype, rtol, atol)

    def check_close(self, actual, expected64, dtype, inputs=(), label: str = "") -> Errors:
        """Each output against the reference's (a tuple of them for an op with several outputs);
        the worst output's errors."""
        if len(self.outputs) > 1:
            if len(actual) != len(self.outputs) or len(expected64) != len(self.outputs):
                raise AssertionError(f"opforge.{self.name} {label}: expected {len(self.outputs)} outputs "
                                     f"({', '.join(self.outputs)}), got {len(actual)}")
            errs = [self._check_one(a, e, dtype, inputs, f"{label} {name}".strip())
                    for a, e, name in zip(actual, expected64, self.outputs)]
            return max(errs, key=lambda e: e.max_ulp)
        return self._check_one(actual, expected64, dtype, inputs, label)

    def _check_one(self, actual, expected64, dtype, inputs, label: str) -> Errors:
        errs = self.errors(actual, expected64, dtype)
        if errs.mismatched:
            rtol, atol = self.tolerance(dtype)
            raise AssertionError(
                f"opforge.{self.name} {label} ({dtype_name(dtype)}): {errs.mismatched} element(s) "
                f"outside rtol={rtol:g} atol={atol:g}; max abs {errs.max_abs:.3g}, max rel "
                f"{errs.max_rel:.3g}, max {errs.max_ulp:.3g} ulp; "
                + describe_worst(actual, expected64, errs, inputs))
        return errs


# ---- Swish ---------------------------------------------------------------------------------------

def swish_reference(x: np.ndarray, beta: float) -> np.ndarray:
    t = beta * x
    e = np.exp(-np.abs(t))  # never overflows: same formulation as kernels/math.h
    r = 1.0 / (1.0 + e)
    return x * np.where(t >= 0, r, e * r)


def swish_composed(x, beta: float = 1.0):
    return x * (beta * x).sigmoid()


def swish_decomposed(e, x, beta: float):
    scaled = x if beta == 1.0 else e.op("Mul", x, e.scalar(beta, x))
    return e.op("Mul", x, e.op("Sigmoid", scaled))


def swish_independent(x: np.ndarray, beta: float) -> np.ndarray:
    return x / (1.0 + np.exp(-beta * x))  # exp overflow -> x/inf = 0: the right limit


def _swish_cases(rng: np.random.Generator, dtype: str) -> list:
    tiny = float(np.finfo(np.float16).smallest_subnormal) if dtype == "float16" else 1e-40
    return [
        Case("random", (rng.standard_normal((4, 37)),), {}),
        Case("default_beta", (rng.standard_normal((3, 5)),), {}),
        Case("beta_1.7", (rng.standard_normal((2, 3, 11)),), {"beta": 1.7}),
        Case("beta_negative", (rng.standard_normal((64,)),), {"beta": -0.75}),
        Case("beta_zero", (rng.standard_normal((5, 7)),), {"beta": 0.0}),
        Case("wide_range", (rng.uniform(-80.0, 80.0, (257,)),), {}),
        Case("huge_pm_1e4", (np.array([1e4, -1e4, 9999.0, -9999.0, 0.0, -0.0, 1.0, -1.0]),), {}),
        Case("huge_beta", (np.array([1e-3, -1e-3, 1.0, -1.0]),), {"beta": 1e4}),
        Case("nan_inf", (np.array([np.nan, 1.0, -np.nan, np.inf, -np.inf, -2.0, 0.0]),), {}),
        Case("denormal", (np.array([tiny, -tiny, 4 * tiny, 0.0]),), {}),
        Case("empty", (np.zeros((0, 5)),), {}),
        Case("rank0", (np.array(0.5),), {}),
        Case("batch1", (rng.standard_normal((1, 64)),), {}),
        Case("large", (rng.standard_normal((64, 4099)),), {}),
        Case("non_contiguous", (rng.standard_normal((8, 33)),), {}, non_contiguous=True),
    ]


def _swish_bad_cases() -> list:
    x = np.ones((2, 3), np.float32)
    return [
        BadCase("int64_input", (np.ones((2, 3), np.int64),), {}, ("opforge.Swish", "X")),
        BadCase("nan_beta", (x,), {"beta": float("nan")}, ("opforge.Swish", "beta")),
        BadCase("inf_beta", (x,), {"beta": float("-inf")}, ("opforge.Swish", "beta")),
        # finite as a double, inf as the float32 every kernel computes with
        BadCase("beta_beyond_float32", (x,), {"beta": 1e39}, ("opforge.Swish", "beta")),
    ]


SWISH = OpSpec(
    name="Swish",
    torch_name="swish",
    inputs=("X",),
    attributes={"beta": Attr("beta", 1.0, "slope inside the sigmoid", _finite)},
    reference_impl=swish_reference,
    # fp32: the bar (looser rtol than torch's 1.3e-6: one rounding of exp plus the product,
    # tighter atol); half types: torch.testing defaults (output rounding dominates).
    tolerances={"float64": (1e-12, 1e-15), "float32": (1e-5, 1e-6),
                "float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5)},
    case_builder=_swish_cases,
    bad_case_builder=_swish_bad_cases,
    doc="Y = X * sigmoid(beta * X), elementwise, any shape",
    composed=swish_composed,
    decomposed=swish_decomposed,
    independent=swish_independent,
)


# ---- RMSNorm -------------------------------------------------------------------------------------

def rms_norm_reference(x: np.ndarray, w: np.ndarray, epsilon: float) -> np.ndarray:
    if x.shape[-1] == 0:
        return np.zeros(x.shape)
    denom = np.mean(x * x, axis=-1, keepdims=True) + epsilon
    inv = np.where(denom == 0, 0.0, 1.0 / np.sqrt(np.where(denom == 0, 1.0, denom)))
    return x * inv * w


def rms_norm_composed(x, w, epsilon: float = 1e-6):
    """In float64 for float64, else in float32 (as RMSNorm is usually written); rows of zeros
    give 0, as the spec asks, and so do its derivatives: rsqrt only sees the rows whose
    denominator is not 0 (its gradient at 0 is inf, and inf * 0 = NaN)."""
    xa = x if x.dtype.itemsize == 8 else x.float()
    wa = w.to(xa.dtype)
    denom = xa.pow(2).mean(dim=-1, keepdim=True) + epsilon
    zero = denom == 0
    inv = denom.masked_fill(zero, 1.0).rsqrt().masked_fill(zero, 0.0)
    return (xa * inv * wa).to(x.dtype)


def rms_norm_decomposed(e, x, w, epsilon: float):
    mean = e.reduce_mean(e.op("Pow", x, e.scalar(2.0, x)), [-1])
    shifted = e.op("Add", mean, e.scalar(epsilon, x))
    if epsilon == 0.0:  # keep rows of zeros exact (0/0 otherwise); only subnormal rows differ
        shifted = e.op("Max", shifted, e.tiny(x))
    return e.op("Mul", e.op("Div", x, e.op("Sqrt", shifted)), w)


def rms_norm_independent(x: np.ndarray, w: np.ndarray, epsilon: float) -> np.ndarray:
    if x.shape[-1] == 0:
        return np.zeros_like(x)
    denom = np.mean(np.square(x), axis=-1, keepdims=True) + epsilon
    return np.where(denom == 0.0, 0.0, x / np.sqrt(denom)) * w


def _rms_norm_cases(rng: np.random.Generator, dtype: str) -> list:
    def w(n):
        return rng.uniform(0.5, 1.5, (n,))

    zero_rows = rng.standard_normal((5, 24))
    zero_rows[1] = 0.0
    zero_rows[3] = 0.0
    nan_rows = rng.standard_normal((4, 16))
    nan_rows[1, 3] = np.nan
    nan_rows[2, 0] = np.inf
    huge = 1e18 if dtype in ("float32", "float64", "bfloat16") else 1e4
    return [
        Case("random", (rng.standard_normal((4, 64)), w(64)), {}),
        Case("rank1", (rng.standard_normal((64,)), w(64)), {}),
        Case("rank3_odd", (rng.standard_normal((2, 3, 17)), w(17)), {"epsilon": 1e-5}),
        Case("rank4", (rng.standard_normal((2, 2, 3, 8)), w(8)), {}),
        Case("zero_rows", (zero_rows, w(24)), {}),
        Case("zero_rows_eps0", (zero_rows, w(24)), {"epsilon": 0.0}),
        Case("large_eps", (rng.standard_normal((3, 10)) * 1e-2, w(10)), {"epsilon": 1e-2}),
        Case("huge_pm_1e4", (rng.choice([-1e4, 1e4], (3, 32)), w(32)), {}),
        Case("huge_magnitude", (rng.standard_normal((2, 16)) * huge, w(16)), {}),
        Case("nan_inf", (nan_rows, w(16)), {}),
        Case("empty_rows", (np.zeros((0, 16)), w(16)), {}),
        Case("empty_batch", (np.zeros((2, 0, 16)), w(16)), {}),
        Case("batch1", (rng.standard_normal((1, 4096)), w(4096)), {}),
        Case("large", (rng.standard_normal((256, 1031)), w(1031)), {}),
        Case("non_contiguous", (rng.standard_normal((6, 40)), w(40)), {}, non_contiguous=True),
    ]


def _rms_norm_bad_cases() -> list:
    x = np.ones((2, 4), np.float32)
    w = np.ones((4,), np.float32)
    return [
        BadCase("int64_input", (np.ones((2, 4), np.int64), w), {}, ("opforge.RMSNorm", "X")),
        BadCase("rank0_input", (np.array(1.0, np.float32), w), {}, ("opforge.RMSNorm", "X")),
        BadCase("weight_length", (x, np.ones((3,), np.float32)), {}, ("opforge.RMSNorm", "W")),
        BadCase("weight_rank", (x, np.ones((1, 4), np.float32)), {}, ("opforge.RMSNorm", "W")),
        BadCase("negative_epsilon", (x, w), {"epsilon": -1.0}, ("opforge.RMSNorm", "epsilon")),
        BadCase("epsilon_beyond_float32", (x, w), {"epsilon": 1e300}, ("opforge.RMSNorm", "epsilon")),
    ]


RMS_NORM = OpSpec(
    name="RMSNorm",
    torch_name="rms_norm",
    inputs=("X", "W"),
    attributes={"epsilon": Attr("epsilon", 1e-6, "added to the mean square", _finite_non_negative)},
    reference_impl=rms_norm_reference,
    # fp32 looser than torch's default: the row reduction runs in a different order (and on the GPU
    # in float32) than the float64 reference; bar set by the issue.
    tolerances={"float64": (1e-10, 1e-12), "float32": (1e-4, 1e-5),
                "float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5)},
    case_builder=_rms_norm_cases,
    bad_case_builder=_rms_norm_bad_cases,
    doc="Y = X / sqrt(mean(X^2, last axis) + epsilon) * W; rows of zeros give 0",
    layout="rows",
    extra={"w_expected": WEIGHT_EXPECTED},  # around X's last dim
    composed=rms_norm_composed,
    decomposed=rms_norm_decomposed,
    independent=rms_norm_independent,
)


# ---- SwiGLU --------------------------------------------------------------------------------------

def swiglu_reference(x: np.ndarray, beta: float) -> np.ndarray:
    d = x.shape[-1] // 2
    return swish_reference(x[..., :d], beta) * x[..., d:]


def swiglu_composed(x, beta: float = 1.0):
    a, b = x.chunk(2, dim=-1)
    return a * (beta * a).sigmoid() * b


def _halves(e, x) -> tuple:
    """A = X[..., :d], B = X[..., d:] for a last dim 2d known only at run time."""
    last = e.op("Gather", e.op("Shape", x), e.ints([-1]), axis=0)
    half = e.op("Div", last, e.ints([2]))
    a = e.op("Slice", x, e.ints([0]), half, e.ints([-1]))
    b = e.op("Slice", x, half, e.ints([2**62]), e.ints([-1]))
    return a, b


def swiglu_decomposed(e, x, beta: float):
    a, b = _halves(e, x)
    return e.op("Mul", swish_decomposed(e, a, beta), b)


def swiglu_independent(x: np.ndarray, beta: float) -> np.ndarray:
    a, b = np.split(x, 2, axis=-1)
    return a / (1.0 + np.exp(-beta * a)) * b


def _swiglu_cases(rng: np.random.Generator, dtype: str) -> list:
    def pairs(a, b):  # X = [A, B] along the last axis
        return np.concatenate([np.asarray(a, np.float64), np.asarray(b, np.float64)], axis=-1)

    special = np.array([np.nan, 1.0, -np.nan, np.inf, -np.inf, -2.0, 0.0, 3.0])
    return [
        Case("random", (rng.standard_normal((4, 2 * 37)),), {}),
        Case("default_beta", (rng.standard_normal((3, 2 * 5)),), {}),
        Case("rank1", (rng.standard_normal((2 * 64,)),), {}),
        Case("beta_1.7_odd_d", (rng.standard_normal((2, 3, 2 * 11)),), {"beta": 1.7}),
        Case("beta_negative", (rng.standard_normal((5, 2 * 16)),), {"beta": -0.75}),
        Case("beta_zero", (rng.standard_normal((5, 2 * 7)),), {"beta": 0.0}),
        Case("d_1", (rng.standard_normal((6, 2)),), {}),
        Case("wide_range", (pairs(rng.uniform(-80.0, 80.0, (3, 33)), rng.uniform(-4, 4, (3, 33))),), {}),
        Case("huge_pm_1e4", (pairs([1e4, -1e4, 9999.0, -9999.0], [1.0, 2.0, -1.0, 0.5]),), {}),
        Case("huge_beta", (pairs([1e-3, -1e-3, 1.0, -1.0], [2.0, 2.0, 2.0, 2.0]),), {"beta": 1e4}),
        Case("nan_inf", (pairs(special, special[::-1]),), {}),
        Case("empty", (np.zeros((0, 2 * 5)),), {}),
        Case("batch1", (rng.standard_normal((1, 2 * 64)),), {}),
        Case("large_odd_d", (rng.standard_normal((64, 2 * 2049)),), {}),
        Case("non_contiguous", (rng.standard_normal((8, 2 * 33)),), {}, non_contiguous=True),
    ]


def _swiglu_bad_cases() -> list:
    x = np.ones((2, 4), np.float32)
    return [
        BadCase("int64_input", (np.ones((2, 4), np.int64),), {}, ("opforge.SwiGLU", "X")),
        BadCase("odd_last_dim", (np.ones((2, 5), np.float32),), {}, ("opforge.SwiGLU", "X", "even")),
        BadCase("rank0_input", (np.array(1.0, np.float32),), {}, ("opforge.SwiGLU", "X", "rank")),
        BadCase("nan_beta", (x,), {"beta": float("nan")}, ("opforge.SwiGLU", "beta")),
        BadCase("inf_beta", (x,), {"beta": float("-inf")}, ("opforge.SwiGLU", "beta")),
        BadCase("beta_beyond_float32", (x,), {"beta": 1e39}, ("opforge.SwiGLU", "beta")),
    ]


SWIGLU = OpSpec(
    name="SwiGLU",
    torch_name="swiglu",
    inputs=("X",),
    attributes={"beta": Attr("beta", 1.0, "slope inside the sigmoid", _finite)},
    reference_impl=swiglu_reference,
    # Swish's bars: the gate's product with B adds one rounding, well inside them.
    tolerances=dict(SWISH.tolerances),
    case_builder=_swiglu_cases,
    bad_case_builder=_swiglu_bad_cases,
    doc="Y = A * sigmoid(beta * A) * B with A = X[..., :d], B = X[..., d:]; X [..., 2d] -> Y [..., d]",
    extra={"x_expected": "a tensor of rank >= 1 whose last dim is even and >= 2"},
    layout="rows",
    split=2,
    composed=swiglu_composed,
    decomposed=swiglu_decomposed,
    independent=swiglu_independent,
)


# ---- GeGLU ---------------------------------------------------------------------------------------

SQRT_2_OVER_PI = 0.7978845608028654  # sqrt(2 / pi): torch's gelu(approximate="tanh") constant
GELU_CUBIC = 0.044715


def _gelu_tanh_inner(a: np.ndarray) -> np.ndarray:
    """u = sqrt(2/pi) * (a + 0.044715 * a^3)"""
    return SQRT_2_OVER_PI * (a + GELU_CUBIC * a**3)


def gelu_tanh_reference(a: np.ndarray) -> np.ndarray:
    """0.5 * a * (1 + tanh(u)) written as a * sigmoid(2u), the same value without the cancellation
    in 1 + tanh(u) for negative a; the sigmoid never overflows, so a large |a| (a^3 beyond float64
    included) gives a or -0, as tanh's saturation does."""
    t = 2.0 * _gelu_tanh_inner(a)
    e = np.exp(-np.abs(t))
    r = 1.0 / (1.0 + e)
    return a * np.where(t >= 0, r, e * r)


def geglu_reference(x: np.ndarray) -> np.ndarray:
    d = x.shape[-1] // 2
    return gelu_tanh_reference(x[..., :d]) * x[..., d:]


def geglu_composed(x):
    import torch.nn.functional as F  # torch's own tanh GELU; the spec imports no torch at load time

    a, b = x.chunk(2, dim=-1)
    return F.gelu(a, approximate="tanh") * b


def geglu_decomposed(e, x):
    """0.5 * A * (1 + Tanh(sqrt(2/pi) * (A + 0.044715 * A*A*A))) * B."""
    a, b = _halves(e, x)
    cube = e.op("Mul", e.op("Mul", a, a), a)
    inner = e.op("Mul", e.op("Add", a, e.op("Mul", cube, e.scalar(GELU_CUBIC, a))),
                 e.scalar(SQRT_2_OVER_PI, a))
    gate = e.op("Mul", e.op("Mul", a, e.scalar(0.5, a)), e.op("Add", e.op("Tanh", inner), e.scalar(1.0, a)))
    return e.op("Mul", gate, b)


def geglu_independent(x: np.ndarray) -> np.ndarray:
    a, b = np.split(x, 2, axis=-1)
    return 0.5 * a * (1.0 + np.tanh(SQRT_2_OVER_PI * (a + GELU_CUBIC * a * a * a))) * b


def _geglu_cases(rng: np.random.Generator, dtype: str) -> list:
    def pairs(a, b):  # X = [A, B] along the last axis
        return np.concatenate([np.asarray(a, np.float64), np.asarray(b, np.float64)], axis=-1)

    special = np.array([np.nan, 1.0, -np.nan, np.inf, -np.inf, -2.0, 0.0, 3.0])
    # tanh saturates from |u| ~ 9 (|a| ~ 5); a^3 overflows float32 beyond ~7e12 (float16's max: 65504)
    huge = 6e4 if dtype == "float16" else 1e13
    saturated = [5.5, -5.5, 30.0, -30.0, 1e4, -1e4, huge, -huge]
    return [
        Case("random", (rng.standard_normal((4, 2 * 37)),), {}),
        Case("rank1", (rng.standard_normal((2 * 64,)),), {}),
        Case("rank3_odd_d", (rng.standard_normal((2, 3, 2 * 11)),), {}),
        Case("d_1", (rng.standard_normal((6, 2)),), {}),
        Case("wide_range", (pairs(rng.uniform(-80.0, 80.0, (3, 33)), rng.uniform(-4, 4, (3, 33))),), {}),
        Case("tanh_saturates", (pairs(saturated, [1.0, 2.0, -1.0, 0.5, 1.0, -2.0, 1.0, 3.0]),), {}),
        Case("nan_inf", (pairs(special, special[::-1]),), {}),
        Case("empty", (np.zeros((0, 2 * 5)),), {}),
        Case("batch1", (rng.standard_normal((1, 2 * 64)),), {}),
        Case("large_odd_d", (rng.standard_normal((64, 2 * 2049)),), {}),
        Case("non_contiguous", (rng.standard_normal((8, 2 * 33)),), {}, non_contiguous=True),
    ]


def _geglu_bad_cases() -> list:
    return [
        BadCase("int64_input", (np.ones((2, 4), np.int64),), {}, ("opforge.GeGLU", "X")),
        BadCase("odd_last_dim", (np.ones((2, 5), np.float32),), {}, ("opforge.GeGLU", "X", "even")),
        BadCase("rank0_input", (np.array(1.0, np.float32),), {}, ("opforge.GeGLU", "X", "rank")),
    ]


GEGLU = OpSpec(
    name="GeGLU",
    torch_name="geglu",
    inputs=("X",),
    attributes={},
    reference_impl=geglu_reference,
    # Swish's bars: the kernels compute the gate as a * sigmoid(2u) with the same sigmoid (u's
    # cube and scale add two roundings), and the product with B one more, well inside them.
    tolerances=dict(SWISH.tolerances),
    case_builder=_geglu_cases,
    bad_case_builder=_geglu_bad_cases,
    doc="Y = gelu_tanh(A) * B with A = X[..., :d], B = X[..., d:], gelu_tanh(a) = 0.5 * a * "
        "(1 + tanh(sqrt(2/pi) * (a + 0.044715 * a^3))); X [..., 2d] -> Y [..., d]",
    extra={"x_expected": "a tensor of rank >= 1 whose last dim is even and >= 2"},
    layout="rows",
    split=2,
    composed=geglu_composed,
    decomposed=geglu_decomposed,
    independent=geglu_independent,
)


# ---- AddRMSNorm ----------------------------------------------------------------------------------

def add_rms_norm_reference(x: np.ndarray, r: np.ndarray, w: np.ndarray, epsilon: float) -> tuple:
    h = x + r
    return rms_norm_reference(h, w, epsilon), h


def add_rms_norm_composed(x, r, w, epsilon: float = 1e-6):
    """What a decoder writes without the fused op: the residual add in X's dtype, then RMSNorm."""
    h = x + r
    return rms_norm_composed(h, w, epsilon), h


def add_rms_norm_decomposed(e, x, r, w, epsilon: float):
    h = e.op("Add", x, r)
    return rms_norm_decomposed(e, h, w, epsilon), h


def add_rms_norm_independent(x: np.ndarray, r: np.ndarray, w: np.ndarray, epsilon: float) -> tuple:
    h = np.add(r, x)
    return rms_norm_independent(h, w, epsilon), h


def _add_rms_norm_cases(rng: np.random.Generator, dtype: str) -> list:
    def w(n):
        return rng.uniform(0.5, 1.5, (n,))

    def pair(shape, scale=1.0):
        return rng.standard_normal(shape) * scale, rng.standard_normal(shape) * scale

    cancels = rng.standard_normal((5, 24))  # rows 1 and 3 of H = X + R are exact zeros
    residual = rng.standard_normal((5, 24))
    residual[1], residual[3] = -cancels[1], -cancels[3]
    nan_x, nan_r = pair((4, 16))
    nan_x[1, 3] = np.nan
    nan_r[2, 0] = np.inf
    nan_r[3, 5], nan_x[3, 5] = np.inf, -np.inf  # inf + -inf: a NaN row
    huge = 1e18 if dtype in ("float32", "float64", "bfloat16") else 1e4
    return [
        Case("random", (*pair((4, 64)), w(64)), {}),
        Case("rank1", (*pair((64,)), w(64)), {}),
        Case("rank3_odd", (*pair((2, 3, 17)), w(17)), {"epsilon": 1e-5}),
        Case("residual_cancels", (cancels, residual, w(24)), {}),
        Case("residual_cancels_eps0", (cancels, residual, w(24)), {"epsilon": 0.0}),
        Case("zero_residual", (rng.standard_normal((3, 10)), np.zeros((3, 10)), w(10)), {}),
        Case("huge_magnitude", (*pair((2, 16), huge), w(16)), {}),
        Case("nan_inf", (nan_x, nan_r, w(16)), {}),
        Case("empty_rows", (np.zeros((0, 16)), np.zeros((0, 16)), w(16)), {}),
        Case("batch1", (*pair((1, 4096)), w(4096)), {}),
        Case("large", (*pair((256, 1031)), w(1031)), {}),
        Case("non_contiguous", (*pair((6, 40)), w(40)), {}, non_contiguous=True),
    ]


def _add_rms_norm_bad_cases() -> list:
    x = np.ones((2, 4), np.float32)
    w = np.ones((4,), np.float32)
    return [
        BadCase("int64_input", (np.ones((2, 4), np.int64), np.ones((2, 4), np.int64), w), {},
                ("opforge.AddRMSNorm", "X")),
        BadCase("rank0_input", (np.array(1.0, np.float32), np.array(1.0, np.float32), w), {},
                ("opforge.AddRMSNorm", "X")),
        BadCase("residual_shape", (x, np.ones((2, 3), np.float32), w), {}, ("opforge.AddRMSNorm", "R")),
        BadCase("residual_broadcast", (x, np.ones((1, 4), np.float32), w), {}, ("opforge.AddRMSNorm", "R")),
        BadCase("weight_length", (x, x, np.ones((3,), np.float32)), {}, ("opforge.AddRMSNorm", "W")),
        BadCase("negative_epsilon", (x, x, w), {"epsilon": -1.0}, ("opforge.AddRMSNorm", "epsilon")),
        BadCase("epsilon_beyond_float32", (x, x, w), {"epsilon": 1e300}, ("opforge.AddRMSNorm", "epsilon")),
    ]


ADD_RMS_NORM = OpSpec(
    name="AddRMSNorm",
    torch_name="add_rms_norm",
    inputs=("X", "R", "W"),
    outputs=("Y", "H"),
    attributes={"epsilon": Attr("epsilon", 1e-6, "added to the mean square", _finite_non_negative)},
    reference_impl=add_rms_norm_reference,
    # RMSNorm's bars, but float16 twice as wide: the kernels normalize H as stored (rounded to
    # X's dtype, so that Y = RMSNorm(H) of the H they return), the float64 reference the exact sum;
    # that rounding and Y's own can add up to 2^-10 in float16 (bfloat16's bar holds both).
    tolerances={"float64": (1e-10, 1e-12), "float32": (1e-4, 1e-5),
                "float16": (2e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5)},
    case_builder=_add_rms_norm_cases,
    bad_case_builder=_add_rms_norm_bad_cases,
    doc="H = X + R; Y = H / sqrt(mean(H^2, last axis) + epsilon) * W; rows of zeros give 0; "
        "R has X's shape",
    layout="rows",
    extra={"w_expected": WEIGHT_EXPECTED},
    composed=add_rms_norm_composed,
    decomposed=add_rms_norm_decomposed,
    independent=add_rms_norm_independent,
)


def swiglu_x_error(shape) -> str | None:
    """The shape rule of SwiGLU's X, as every layer words it; None when `shape` is valid."""
    return SWIGLU.x_error(shape)


def output_shape(op: OpSpec, shape) -> tuple:
    """Y's shape for X's shape (the gated ops halve the last axis; the others keep it)."""
    return op.output_shape(shape)


OPS = {op.name: op for op in (SWISH, RMS_NORM, SWIGLU, GEGLU, ADD_RMS_NORM)}
