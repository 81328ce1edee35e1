"""The op model every opforge op is declared in (OpSpec, Attr, Case, BadCase), the canonical error
text and the attribute rules; the ops themselves are opforge_spec/ops/<op>.py."""
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
    # What an .out overload may write over: output -> the inputs it may be itself (same memory,
    # same layout), each read row by row before that row of the output is written. Any other
    # overlap of an output with an input (W above all: every row reads it) is refused.
    overwrites: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def may_overwrite(self, output: str, input_name: str) -> bool:
        """Whether the .out overload's `output` may be the input `input_name` itself."""
        return input_name in self.overwrites.get(output, ())

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

    def w_error(self, x_shape, w_shape) -> str | None:
        """The rule of a per-column weight W (1-D, as long as X's last dim; X checked first), as
        every layer words it (shapes.h w_shape_error); None when valid."""
        x_shape, w_shape = tuple(x_shape), tuple(w_shape)
        cols = x_shape[-1] if x_shape else 0
        if len(w_shape) == 1 and w_shape[0] == cols:
            return None
        before, after = WEIGHT_EXPECTED
        return error(self.name, "W", f"{before}{cols}{after}", "shape " + _shape_text(w_shape))

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
