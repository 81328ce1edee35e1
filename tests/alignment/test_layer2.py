"""Layer 2: exported ONNX (custom-domain form by both exporters, decomposed form) in ONNX Runtime
with opforge_ort, and in onnx's reference evaluator."""
import json

import onnx
import pytest
from conftest import SUITE_DTYPES

from opforge_align.harness import export


def describe(checks) -> str:
    return "\n".join(f"{c.subject} vs {c.against} {c.op} {c.dtype} {c.case}: {c.detail}"
                     for c in checks)


def test_every_form_is_exported_with_one_opforge_node_per_call(export_dir):
    manifest = json.loads((export_dir / "manifest.json").read_text())
    for entry in manifest["entries"]:
        for form, path in entry["models"].items():
            if isinstance(path, dict) and path.get("skipped"):  # a form the op cannot be written in
                continue
            assert isinstance(path, str), f"{entry['id']} {form}: {path}"
            graph = onnx.load(str(export_dir / path)).graph
            domains = [n.domain for n in graph.node]
            if form.startswith("custom"):
                assert domains == ["opforge"], f"{path}: {[n.op_type for n in graph.node]}"
            else:
                assert "opforge" not in domains, path


@pytest.mark.parametrize("dtype", SUITE_DTYPES)
@pytest.mark.parametrize("form", export.FORMS)
def test_ort_matches_reference_and_torch(ort_run, form, dtype):
    _, results = ort_run
    mine = [c for c in results.checks if c.dtype == dtype and c.subject == f"ort.{form}"]
    assert mine, "nothing ran"
    failed = [c for c in mine if not c.passed and not c.known and not c.skipped]
    assert not failed, describe(failed)


@pytest.mark.parametrize("form", [f for f in export.FORMS if f.startswith("custom")])
def test_custom_domain_form_is_bitwise_equal_to_opforge_torch(ort_run, form):
    _, results = ort_run
    same = [c for c in results.checks if c.subject == f"ort.{form}" and c.against == "opforge_torch"]
    assert same and all(c.rule == "bitwise equal" for c in same)
    assert all(c.passed for c in same), describe([c for c in same if not c.passed])


@pytest.mark.parametrize("form", export.FORMS)
def test_reference_evaluator_agrees(ort_run, form):
    _, results = ort_run
    mine = [c for c in results.checks if c.subject == f"refeval.{form}"]
    if mine and all(c.skipped for c in mine):
        pytest.skip(mine[0].skipped)
    failed = [c for c in mine if not c.passed and not c.skipped and not c.known]
    assert mine and not failed, describe(failed)
