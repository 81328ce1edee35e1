"""opforge.ProbeSigmoidGLU, a probe op of the gated family (test_two_file_ops.py adds it to a copy of
the tree with its math header, probe_sigmoid_glu.h, and nothing else): Y = sigmoid(A) * B."""
from __future__ import annotations

import numpy as np

from ..model import Case, OpSpec
from .swiglu import GATED_X_EXPECTED, _halves, gated_bad_x_cases


def probe_sigmoid_glu_reference(x: np.ndarray) -> np.ndarray:
    a, b = np.split(x, 2, axis=-1)
    e = np.exp(-np.abs(a))
    return np.where(a >= 0, 1.0 / (1.0 + e), e / (1.0 + e)) * b


def probe_sigmoid_glu_composed(x):
    a, b = x.chunk(2, dim=-1)
    return a.sigmoid() * b


def probe_sigmoid_glu_decomposed(e, x):
    a, b = _halves(e, x)
    return e.op("Mul", e.op("Sigmoid", a), b)


def probe_sigmoid_glu_independent(x: np.ndarray) -> np.ndarray:
    a, b = np.split(x, 2, axis=-1)
    return b / (1.0 + np.exp(-a))


def _cases(rng: np.random.Generator, dtype: str) -> list:
    return [
        Case("random", (rng.standard_normal((4, 2 * 37)),), {}),
        Case("rank1", (rng.standard_normal((2 * 64,)),), {}),
        Case("d_1", (rng.standard_normal((6, 2)),), {}),
        Case("wide_range", (rng.uniform(-80.0, 80.0, (3, 2 * 33)),), {}),
        Case("empty", (np.zeros((0, 2 * 5)),), {}),
        Case("non_contiguous", (rng.standard_normal((8, 2 * 33)),), {}, non_contiguous=True),
    ]


PROBE_SIGMOID_GLU = OpSpec(
    name="ProbeSigmoidGLU",
    torch_name="probe_sigmoid_glu",
    inputs=("X",),
    attributes={},
    reference_impl=probe_sigmoid_glu_reference,
    tolerances={"float64": (1e-12, 1e-15), "float32": (1e-5, 1e-6),
                "float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5)},
    case_builder=_cases,
    bad_case_builder=lambda: gated_bad_x_cases("ProbeSigmoidGLU"),
    doc="Y = sigmoid(A) * B with A = X[..., :d], B = X[..., d:]; X [..., 2d] -> Y [..., d]",
    extra={"x_expected": GATED_X_EXPECTED},
    layout="rows",
    split=2,
    composed=probe_sigmoid_glu_composed,
    decomposed=probe_sigmoid_glu_decomposed,
    independent=probe_sigmoid_glu_independent,
)
