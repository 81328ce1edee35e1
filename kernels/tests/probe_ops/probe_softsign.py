"""opforge.ProbeSoftsign, a probe op of the elementwise family (test_two_file_ops.py adds it to a copy
of the tree with its math header, probe_softsign.h, and nothing else): Y = X / (1 + alpha * |X|)."""
from __future__ import annotations

import numpy as np

from ..model import Attr, BadCase, Case, OpSpec, _finite_non_negative


def probe_softsign_reference(x: np.ndarray, alpha: float) -> np.ndarray:
    return x / (1.0 + alpha * np.abs(x))


def probe_softsign_composed(x, alpha: float = 1.0):
    return x / (1 + alpha * x.abs())


def probe_softsign_decomposed(e, x, alpha: float):
    scaled = e.op("Mul", e.op("Abs", x), e.scalar(alpha, x))
    return e.op("Div", x, e.op("Add", scaled, e.scalar(1.0, x)))


def probe_softsign_independent(x: np.ndarray, alpha: float) -> np.ndarray:
    return np.sign(x) * np.abs(x) / (np.abs(x) * alpha + 1.0)


def _cases(rng: np.random.Generator, dtype: str) -> list:
    return [
        Case("random", (rng.standard_normal((4, 37)),), {}),
        Case("alpha_0.5", (rng.standard_normal((3, 5)),), {"alpha": 0.5}),
        Case("alpha_zero", (rng.standard_normal((5, 7)),), {"alpha": 0.0}),
        Case("wide_range", (rng.uniform(-80.0, 80.0, (257,)),), {}),
        Case("zeros", (np.zeros((2, 3)),), {}),
        Case("empty", (np.zeros((0, 5)),), {}),
        Case("rank0", (np.array(0.5),), {}),
        Case("non_contiguous", (rng.standard_normal((8, 33)),), {}, non_contiguous=True),
    ]


def _bad_cases() -> list:
    x = np.ones((2, 3), np.float32)
    op = "opforge.ProbeSoftsign"
    return [
        BadCase("int64_input", (np.ones((2, 3), np.int64),), {}, (op, "X")),
        BadCase("negative_alpha", (x,), {"alpha": -1.0}, (op, "alpha")),
        BadCase("nan_alpha", (x,), {"alpha": float("nan")}, (op, "alpha")),
    ]


PROBE_SOFTSIGN = OpSpec(
    name="ProbeSoftsign",
    torch_name="probe_softsign",
    inputs=("X",),
    attributes={"alpha": Attr("alpha", 1.0, "the slope of |X| in the denominator", _finite_non_negative)},
    reference_impl=probe_softsign_reference,
    tolerances={"float64": (1e-12, 1e-15), "float32": (1e-5, 1e-6),
                "float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5)},
    case_builder=_cases,
    bad_case_builder=_bad_cases,
    doc="Y = X / (1 + alpha * |X|), elementwise, any shape",
    composed=probe_softsign_composed,
    decomposed=probe_softsign_decomposed,
    independent=probe_softsign_independent,
    overwrites={"Y": ("X",)},
)
