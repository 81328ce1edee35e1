"""opforge.ProbeAddRMSNorm, a probe op of the residual_row_norm family (test_two_file_ops.py adds it
to a copy of the tree with its math header, probe_add_rms_norm.h, and nothing else): AddRMSNorm's
math under its own name."""
from __future__ import annotations

import dataclasses

from ..model import BadCase
from .add_rms_norm import ADD_RMS_NORM


def _bad_cases() -> list:
    return [BadCase(c.name, c.inputs, c.attrs,
                    tuple(m.replace("opforge.AddRMSNorm", "opforge.ProbeAddRMSNorm") for m in c.mentions))
            for c in ADD_RMS_NORM.bad_cases()]


PROBE_ADD_RMS_NORM = dataclasses.replace(
    ADD_RMS_NORM, name="ProbeAddRMSNorm", torch_name="probe_add_rms_norm", bad_case_builder=_bad_cases,
    order=1000)
