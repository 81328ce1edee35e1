"""Every op of the spec has what opforge-align compares it with: a float64 reference op, an
independent reference-evaluator op, an export module and (harness) its composed torch form."""
import pytest

import opforge_spec as spec
from opforge_align import reference
from opforge_align.harness import refeval


def test_every_op_has_a_reference_op_and_a_third_opinion():
    assert [c.__name__ for c in reference.OP_CLASSES] == list(spec.OPS)
    assert [c.__name__ for c in refeval.OP_CLASSES] == list(spec.OPS)
    assert all(op.independent for op in spec.OPS.values())


def test_every_op_has_an_export_module_and_a_composed_form():
    pytest.importorskip("torch", reason="the export harness needs torch")
    from opforge_align.harness import export, layer1

    assert list(export.MODULES) == list(spec.OPS)
    assert list(layer1.COMPOSED) == list(spec.OPS) and all(layer1.COMPOSED.values())
