"""opforge.ProbeRMSNormQuant, a probe op of the row_norm_quant family (test_two_file_ops.py adds it to
a copy of the tree with its math header, probe_rms_norm_quant.h, and nothing else): RMSNormQuant
with half its inverse, Y = RMSNorm(X, W) / 2 (exact in float32: Scale halves, Q stays but where
min_scale or scale_ub bound the scale), so every form is RMSNormQuant's with W / 2."""
from __future__ import annotations

import dataclasses

from ..model import BadCase
from .rms_norm_quant import (
    RMS_NORM_QUANT,
    rms_norm_quant_composed,
    rms_norm_quant_decomposed,
    rms_norm_quant_independent,
    rms_norm_quant_reference,
)


def _reference(x, w, epsilon, quant_dtype, scale_ub):
    return rms_norm_quant_reference(x, w / 2, epsilon, quant_dtype, scale_ub)


def _composed(x, w, epsilon=1e-6, quant_dtype=3, scale_ub=0.0):
    return rms_norm_quant_composed(x, w / 2, epsilon, quant_dtype, scale_ub)


def _decomposed(e, x, w, epsilon, quant_dtype=3, scale_ub=0.0):
    return rms_norm_quant_decomposed(e, x, e.op("Mul", w, e.scalar(0.5, w)), epsilon, quant_dtype, scale_ub)


def _independent(x, w, epsilon, quant_dtype, scale_ub):
    return rms_norm_quant_independent(x, w * 0.5, epsilon, quant_dtype, scale_ub)


def _bad_cases() -> list:
    return [BadCase(c.name, c.inputs, c.attrs, tuple(m.replace("opforge.RMSNormQuant", "opforge.ProbeRMSNormQuant")
                                                     for m in c.mentions)) for c in RMS_NORM_QUANT.bad_cases()]


PROBE_RMS_NORM_QUANT = dataclasses.replace(
    RMS_NORM_QUANT, name="ProbeRMSNormQuant", torch_name="probe_rms_norm_quant", bad_case_builder=_bad_cases,
    order=1000, reference_impl=_reference, composed=_composed, decomposed=_decomposed, independent=_independent)
