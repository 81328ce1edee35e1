"""The op model every opforge op is declared in (OpSpec, Attr, Case, BadCase), the canonical error
text and the attribute rules; the ops themselves are opforge_spec/ops/<op>.py."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .numerics import (
    QUANTIZED_DTYPES,
    Errors,
    describe_worst,
    dtype_name,
    measure,
    quantized_errors,
    round_to,
)

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


# W may be float32 with a 16-bit X (a mixed-dtype call, computed in float32 with the weight as
# given: HF's Gemma keeps its norm weight in float32); the C++ twin is shapes.h weight_dtype_ok.
WEIGHT_FLOAT32_WITH = ("float16", "bfloat16")


def weight_dtypes(x_dtype: str) -> tuple[str, ...]:
    """The dtypes a per-column weight W may have with an X of `x_dtype` (dtype names)."""
    return (x_dtype, "float32") if x_dtype in WEIGHT_FLOAT32_WITH else (x_dtype,)


def _shape_text(shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def finite_in_float32(value: float) -> bool:
    return abs(value) < FLOAT32_OVERFLOW


# Integer and enum attributes travel as float32 through the kernels (AttrValues) and as float or
# int through the layers: an integer is exact in float32 up to 2**24 in magnitude.
INT_LIMIT = 2**24

# Element types by their ONNX TensorProto.DataType code: an enum attribute that picks an output's
# dtype takes these values (as Cast's `to` does), and the C++ twin is ElemType (attrs.h).
DTYPE_CODES = {"float32": 1, "int8": 3, "float16": 10, "float64": 11, "bfloat16": 16, "float8_e4m3fn": 17}


@dataclass(frozen=True)
class Attr:
    """An attribute: `kind` "float" (the default), "int" or "enum" (an int whose valid values are
    `choices`, name -> value; the layers name them in messages)."""
    name: str
    default: float
    doc: str
    check: Callable[[float], str | None]  # returns the expectation text when the value is invalid
    kind: str = "float"
    choices: dict[str, int] | None = None

    def error(self, op_name: str, value: float) -> str | None:
        """The canonical error text for `value`, or None when it is valid."""
        expected = self.check(value)
        return None if expected is None else error(op_name, self.name, expected, format_number(value))

    def choice_name(self, value) -> str:
        """An enum attribute's value by its name (int8, float8_e4m3fn, ...)."""
        names = {v: k for k, v in (self.choices or {}).items()}
        return names[int(value)]


def int_attr(name: str, default: int, doc: str, non_negative: bool = False) -> Attr:
    """An integer attribute (exact in float32: |value| <= INT_LIMIT)."""
    return Attr(name, default, doc, _non_negative_integer if non_negative else _integer, kind="int")


def enum_attr(name: str, choices: dict[str, int], default: str, doc: str) -> Attr:
    """An enum attribute: one of `choices` (name -> int value), `default` by its name."""
    def one_of(value: float) -> str | None:
        return None if value in choices.values() else one_of_text(choices)

    one_of.__name__ = "_one_of"
    return Attr(name, choices[default], doc, one_of, kind="enum", choices=dict(choices))


def one_of_text(choices: dict[str, int]) -> str:
    """An enum's expectation in messages: `one of 3 (int8), 17 (float8_e4m3fn)` (attrs.h twin)."""
    return "one of " + ", ".join(f"{v} ({k})" for k, v in choices.items())


def _finite(value: float) -> str | None:
    return None if finite_in_float32(value) else "a finite float32"


def _finite_non_negative(value: float) -> str | None:
    return None if finite_in_float32(value) and value >= 0 else "a finite float32 >= 0"


def _is_integer(value: float) -> bool:
    return finite_in_float32(value) and float(value).is_integer() and abs(value) <= INT_LIMIT


def _integer(value: float) -> str | None:
    return None if _is_integer(value) else f"an integer in [-{INT_LIMIT}, {INT_LIMIT}]"


def _non_negative_integer(value: float) -> str | None:
    return None if _is_integer(value) and value >= 0 else f"an integer in [0, {INT_LIMIT}]"


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


# The launcher families: (layout, split, inputs, outputs) -> family (OpSpec.family).
FAMILIES = {("elementwise", 1, ("X",), ("Y",)): "elementwise",
            ("rows", 2, ("X",), ("Y",)): "gated",
            ("rows", 1, ("X", "W"), ("Y",)): "row_norm",
            ("rows", 1, ("X", "R", "W"), ("Y", "H")): "residual_row_norm",
            ("rows", 1, ("X", "W"), ("Q", "Scale")): "row_norm_quant",
            ("rows", 1, ("X", "R", "W"), ("Q", "Scale", "H")): "residual_row_norm_quant"}
# The quantized rows' families also need their outputs' rule (OpSpec.quantized_rows): Q of the
# dtype the enum attribute quant_dtype picks, Scale float32 with one value per row, H of X's; no
# gradient; the attributes quant_dtype and scale_ub, which the launchers read off the functor.
QUANT_FAMILIES = ("row_norm_quant", "residual_row_norm_quant")


@dataclass(frozen=True)
class StandardForm:
    """The op as a standard ai.onnx op, from the opset that introduced it: what an export's
    decomposed="auto" writes where the runtime implements it. `after`: the standard ops written
    before it (AddRMSNorm is an Add, then RMSNormalization of its sum); an op with none is
    `op_type` itself, which is then judged by the op's tolerances (standard_equivalents)."""
    op_type: str
    opset: int
    after: tuple[str, ...] = ()


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
    #   e.reduce_max(x, axes)                 ReduceMax, the same way;
    #   e.tiny(like)                          the smallest normal number, of `like`'s type.
    decomposed: Callable | None = None
    # attributes -> why `decomposed` cannot write the op with them, or None (it can): what a
    # harness asks before exporting a decomposed form it would otherwise see refused.
    decomposed_refusal: Callable[[dict], str | None] | None = None
    # What an .out overload may write over: output -> the inputs it may be itself (same memory,
    # same layout), each read row by row before that row of the output is written. Any other
    # overlap of an output with an input (W above all: every row reads it) is refused.
    overwrites: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # The op's place in every table (descriptors, schemas, manifests): ops sort by (order, name).
    # opforge's own ops take 10, 20, ...; an op that does not say comes after them, by name.
    order: int = 1000
    # An output's own dtype: output -> a dtype name (fixed, e.g. "float32") or the name of an enum
    # attribute whose values are DTYPE_CODES (chosen per call, e.g. "quant_dtype"). An output not
    # listed has X's dtype.
    output_dtypes: dict[str, str] = field(default_factory=dict)
    # An output's own shape rule: output -> "row" (X's shape with the last dim 1: one value per
    # row). Not listed: the first output has the op's rule (output_shape), the others X's shape.
    output_shapes: dict[str, str] = field(default_factory=dict)
    # False: the op has no derivative (an inference op): torch refuses backward naming the op, and
    # no layer has backward kernels or a backward schema for it.
    has_gradient: bool = True
    # The op as a standard ai.onnx op (StandardForm), where ONNX has one.
    standard: StandardForm | None = None

    def shape_rule(self, output: str) -> str:
        """An output's shape rule: "split" (the op's rule: X's shape, the last dim divided by
        `split`), "x" (X's shape) or "row" (X's shape, last dim 1)."""
        if output in self.output_shapes:
            return self.output_shapes[output]
        return "split" if output == self.outputs[0] else "x"

    def output_shape_of(self, output: str, x_shape) -> tuple:
        """The shape of `output` for X's shape."""
        shape, rule = tuple(x_shape), self.shape_rule(output)
        if rule == "row":
            return shape[:-1] + (1,)
        return self.output_shape(shape) if rule == "split" else shape

    def output_dtype(self, output: str, x_dtype: str, attrs: dict | None = None) -> str:
        """The dtype name of `output` for X's dtype name and the call's attributes (defaults for
        those not given)."""
        rule = self.output_dtypes.get(output)
        if rule is None:
            return x_dtype
        if rule in self.attributes:
            attr = self.attributes[rule]
            return attr.choice_name({**self.defaults(), **(attrs or {})}[rule])
        return rule

    def quantized_output(self, output: str) -> bool:
        """Whether `output`'s dtype is chosen by an enum attribute (a quantized output, compared
        within one quantization step: quantized_errors)."""
        return self.output_dtypes.get(output) in self.attributes

    @property
    def family(self) -> str | None:
        """The launcher family the kernels run the op with, from its shape rule and tensors:
        "elementwise" (any shape, X only), "gated" (X = [A, B] over the last axis), "row_norm"
        (rows of X with a per-column weight W) or "residual_row_norm" (X, a residual R, W; outputs
        Y and H); its math header gives `<Name>Math` for that family and the generator writes its
        bindings (CONTRIBUTING.md). "row_norm_quant" (X, W -> Q, Scale) and
        "residual_row_norm_quant" (X, R, W -> Q, Scale, H): the quantized rows, recognized by their
        tensors and their outputs' rule (quantized_rows). None: an op of a new shape (other
        outputs of their own dtype or shape, no gradient included), whose bindings are written by
        hand."""
        family = FAMILIES.get((self.layout, self.split, tuple(self.inputs), tuple(self.outputs)))
        if family in QUANT_FAMILIES:
            return family if self.quantized_rows() else None
        if self.output_dtypes or self.output_shapes or not self.has_gradient:
            return None
        return family

    def quantized_rows(self) -> bool:
        """The outputs' rule of the quantized rows' families: Q's dtype picked by the enum
        attribute quant_dtype, Scale float32 of shape [..., 1], any other output (H) of X's dtype
        and shape, no gradient, and a scale_ub attribute (the launchers read both off the op's
        functor)."""
        return (not self.has_gradient and self.output_dtypes == {"Q": "quant_dtype", "Scale": "float32"}
                and self.output_shapes == {"Scale": "row"} and self.quantized_output("Q")
                and "scale_ub" in self.attributes)

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

    def w_dtype_error(self, x_dtype: str, w_dtype: str) -> str | None:
        """W's dtype rule (weight_dtypes), as every layer words it (shapes.h weight_dtype_error);
        None when valid."""
        allowed = weight_dtypes(x_dtype)
        if w_dtype in allowed:
            return None
        expected = f"dtype {x_dtype} (dtype of X)" + (" or float32" if len(allowed) > 1 else "")
        return error(self.name, "W", expected, w_dtype)

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

    def check_close(self, actual, expected64, dtype, inputs=(), label: str = "", attrs=None) -> Errors:
        """Each output against the reference's (a tuple of them for an op with several outputs);
        the worst output's errors. A quantized output (quantized_output) is compared within one
        quantization step of its dtype (from the tensor's own dtype where it has one, else from
        `attrs`, else the default); the count of elements one step off is in Errors.off_by_one."""
        if len(self.outputs) > 1:
            if len(actual) != len(self.outputs) or len(expected64) != len(self.outputs):
                raise AssertionError(f"opforge.{self.name} {label}: expected {len(self.outputs)} outputs "
                                     f"({', '.join(self.outputs)}), got {len(actual)}")
            errs = [self._check_output(name, a, e, dtype, inputs, f"{label} {name}".strip(), attrs)
                    for a, e, name in zip(actual, expected64, self.outputs)]
            return max(errs, key=lambda e: e.max_ulp)
        return self._check_output(self.outputs[0], actual, expected64, dtype, inputs, label, attrs)

    def _check_output(self, output, actual, expected64, dtype, inputs, label, attrs) -> Errors:
        actual, given_dtype = _as_array(actual)
        if not self.quantized_output(output):
            return self._check_one(actual, expected64, dtype, inputs, label)
        qdtype = given_dtype if given_dtype in QUANTIZED_DTYPES else self.output_dtype(output, "", attrs)
        errs = quantized_errors(actual, expected64, qdtype)
        if errs.mismatched:
            raise AssertionError(
                f"opforge.{self.name} {label} ({qdtype}): {errs.mismatched} element(s) more than one "
                f"quantization step off ({errs.off_by_one} one step off); "
                + describe_worst(actual, expected64, errs, inputs))
        return errs

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


def _as_array(values) -> tuple:
    """(a float64-convertible array, the dtype name of `values` when it has one): a torch tensor of
    a dtype numpy lacks (float8) is read as float32 (duck-typed: the spec does not import torch)."""
    given = str(getattr(values, "dtype", "")).replace("torch.", "")
    if given in QUANTIZED_DTYPES and hasattr(values, "float"):
        values = values.detach().cpu().float().numpy()
    return values, given
