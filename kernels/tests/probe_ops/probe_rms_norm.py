"""opforge.ProbeRMSNorm, a probe op of the row_norm family (test_two_file_ops.py adds it to a copy of
the tree with its math header, probe_rms_norm.h, and nothing else): RMSNorm's math under its own
name, epsilon 1e-5 by default."""
from __future__ import annotations

import dataclasses

from ..model import Attr, BadCase, _finite_non_negative
from .rms_norm import RMS_NORM


def _bad_cases() -> list:
    return [BadCase(c.name, c.inputs, c.attrs, tuple(m.replace("opforge.RMSNorm", "opforge.ProbeRMSNorm")
                                                     for m in c.mentions)) for c in RMS_NORM.bad_cases()]


PROBE_RMS_NORM = dataclasses.replace(
    RMS_NORM, name="ProbeRMSNorm", torch_name="probe_rms_norm", bad_case_builder=_bad_cases, order=1000,
    attributes={"epsilon": Attr("epsilon", 1e-5, "added to the mean square", _finite_non_negative)})
