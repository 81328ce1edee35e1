"""The decomposed forms at opset 17 through the TorchScript exporter: the reductions written with
their axes as an attribute (the emitter's path below opset 18; the rest of the suite exports opset
18), float32 and float64, for the ops whose form reduces rows (RMSNormQuant, AddRMSNormQuant: Scale,
the row output) and GeGLU (float64 Tanh). The matrix's ci-gpu profile exports this opset for ONNX
Runtime 1.24.4 and 1.31.1: with OPFORGE_ALIGN_ORT_PYTHONS naming such venvs, each runs it too."""
import os
import subprocess
import warnings

import onnx
import pytest
from _package import SOURCES

from opforge_align.harness import export, ort_check

ALIGN = SOURCES / "opforge_align" / "__main__.py"  # another venv: this tree's sources
OPSET = 17
OPS = ("RMSNormQuant", "AddRMSNormQuant", "GeGLU")
DTYPES = ("float32", "float64")
FORM = "decomposed-ts"


def describe(checks) -> str:
    return "\n".join(f"{c.subject} vs {c.against} {c.op} {c.dtype} {c.case}: {c.detail}" for c in checks)


@pytest.fixture(scope="module")
def opset17_dir(run_once):
    import opforge_spec

    def make(out):
        # IR 8: an ORT < 1.18 among OPFORGE_ALIGN_ORT_PYTHONS reads it too
        export.export_all(out, opset=OPSET, ir_version=8, ops=[opforge_spec.OPS[n] for n in OPS],
                          dtypes=DTYPES, forms=(FORM,))
        return out
    return run_once("export-opset17", make)


def _models(folder):
    import json

    manifest = json.loads((folder / "manifest.json").read_text())
    paths = [(e, e["models"][FORM]) for e in manifest["entries"]]
    assert {e["op"] for e, _ in paths} == set(OPS) and {e["dtype"] for e, _ in paths} == set(DTYPES)
    return [(e, folder / p) for e, p in paths if isinstance(p, str)]  # float8: refused, by its reason


def test_reductions_take_their_axes_as_an_attribute_at_opset_17(opset17_dir):
    models = _models(opset17_dir)
    assert len(models) >= 2 * len(OPS)
    for entry, path in models:
        proto = onnx.load(str(path))
        assert {(o.domain or "ai.onnx", o.version) for o in proto.opset_import} == {("ai.onnx", OPSET)}, path
        reductions = [n for n in proto.graph.node if n.op_type.startswith("Reduce")]
        if entry["op"] != "GeGLU":  # ReduceMean of X^2, ReduceMax of |Y| over the last axis
            assert sorted(n.op_type for n in reductions) == ["ReduceMax", "ReduceMean"], path
        for node in reductions:
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            assert (list(node.input[1:]), attrs) == ([], {"axes": [-1], "keepdims": 1}), (path, node)


def test_this_onnx_runtime_and_the_reference_evaluator_match_the_reference(opset17_dir, tmp_path):
    with warnings.catch_warnings():  # the reference evaluator's numpy on the empty cases
        warnings.simplefilter("ignore", RuntimeWarning)
        results = ort_check.check_folder(opset17_dir, tmp_path, library=None)
    ran = [c for c in results.checks if c.subject in (f"ort.{FORM}", f"refeval.{FORM}")]
    assert {(c.subject, c.op, c.dtype) for c in ran if c.passed} == {
        (f"{runtime}.{FORM}", op, dtype) for runtime in ("ort", "refeval") for op in OPS for dtype in DTYPES}
    failed = [c for c in ran if not c.passed and not c.skipped and not c.known]
    assert not failed, describe(failed)
    # the reference evaluator is nobody's listed deviation: the graph itself is right
    assert not [c for c in ran if c.subject.startswith("refeval") and not c.passed], describe(ran)


def test_other_onnx_runtime_releases_match_or_deviate_as_listed(opset17_dir, tmp_path):
    pythons = [p for p in os.environ.get("OPFORGE_ALIGN_ORT_PYTHONS", "").split(":") if p]
    if not pythons:
        pytest.skip("set OPFORGE_ALIGN_ORT_PYTHONS to venv pythons of other ONNX Runtime releases")
    for i, python in enumerate(pythons):
        out = tmp_path / f"ort{i}"
        run = subprocess.run([python, str(ALIGN), "layer2", "--models", str(opset17_dir),
                              "--allow-missing-plugin", "--out", str(out)],
                             capture_output=True, text=True, check=False)
        assert run.returncode == 0, f"{python}:\n{run.stdout[-4000:]}\n{run.stderr[-4000:]}"
        assert (out / "ort_results.json").is_file(), python
