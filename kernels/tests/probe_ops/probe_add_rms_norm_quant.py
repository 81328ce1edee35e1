"""opforge.ProbeAddRMSNormQuant, a probe op of the residual_row_norm_quant family
(test_two_file_ops.py adds it to a copy of the tree with its math header,
probe_add_rms_norm_quant.h, and nothing else): AddRMSNormQuant with the residual subtracted,
H = X - R, so every form is AddRMSNormQuant's with -R."""
from __future__ import annotations

import dataclasses

from ..model import BadCase
from .add_rms_norm_quant import (
    ADD_RMS_NORM_QUANT,
    add_rms_norm_quant_composed,
    add_rms_norm_quant_independent,
    add_rms_norm_quant_reference,
)
from .rms_norm_quant import rms_norm_quant_decomposed


def _reference(x, r, w, epsilon, quant_dtype, scale_ub):
    return add_rms_norm_quant_reference(x, -r, w, epsilon, quant_dtype, scale_ub)


def _composed(x, r, w, epsilon=1e-6, quant_dtype=3, scale_ub=0.0):
    return add_rms_norm_quant_composed(x, -r, w, epsilon, quant_dtype, scale_ub)


def _decomposed(e, x, r, w, epsilon, quant_dtype=3, scale_ub=0.0):
    h = e.op("Sub", x, r)
    return (*rms_norm_quant_decomposed(e, h, w, epsilon, quant_dtype, scale_ub), h)


def _independent(x, r, w, epsilon, quant_dtype, scale_ub):
    return add_rms_norm_quant_independent(x, -r, w, epsilon, quant_dtype, scale_ub)


def _bad_cases() -> list:
    return [BadCase(c.name, c.inputs, c.attrs,
                    tuple(m.replace("opforge.AddRMSNormQuant", "opforge.ProbeAddRMSNormQuant") for m in c.mentions))
            for c in ADD_RMS_NORM_QUANT.bad_cases()]


PROBE_ADD_RMS_NORM_QUANT = dataclasses.replace(
    ADD_RMS_NORM_QUANT, name="ProbeAddRMSNormQuant", torch_name="probe_add_rms_norm_quant",
    bad_case_builder=_bad_cases, order=1000, reference_impl=_reference, composed=_composed, decomposed=_decomposed,
    independent=_independent)
