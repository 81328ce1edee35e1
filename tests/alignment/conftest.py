"""Shared fixtures: one export folder and one ONNX Runtime run per test run (exports are the slow
part), shared by every pytest-xdist worker of the run."""
from __future__ import annotations

import json
import os
import shutil

import _package  # noqa: F401  (opforge_align: installed, else packages/align/src)
import pytest

from opforge_align.harness.stage import fault_arg  # noqa: F401  (fails early if it is broken)
from opforge_spec.testing import BUSY, run_once  # noqa: F401  (run_once: a fixture)

torch = pytest.importorskip("torch", reason="the torch side of the alignment needs torch")
pytest.importorskip("opforge_torch", reason="opforge_torch is not installed")
pytest.importorskip("onnxruntime", reason="layer 2 needs onnxruntime")


def pytest_configure(config):
    # onnx's reference Sigmoid/Div warn on the NaN/Inf/1e4 cases (expected), the exporters on
    # their own deprecations: neither is about opforge.
    for line in ("ignore::RuntimeWarning:onnx", "ignore::DeprecationWarning",
                 "ignore::FutureWarning", "ignore::UserWarning:torch"):
        config.addinivalue_line("filterwarnings", line)
    # Under pytest-xdist each worker gets its share of torch's threads: one per core in every
    # worker oversubscribes the cores (packages/torch_ext/tests: twice as slow under -n 2).
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        torch.set_num_threads(max(1, torch.get_num_threads() // workers))


# The suite aligns float32, the dtype of the bitwise torch-vs-ORT rule; float64 (half of the
# export time) is aligned by the matrix's export and align stages (nox -s matrix).
SUITE_DTYPES = ("float32",)


def _export_one_op(name: str):
    def make(out):
        import opforge_spec
        from opforge_align.harness import export

        export.export_all(out, opset=18, ops=[opforge_spec.OPS[name]], dtypes=SUITE_DTYPES)
        return out
    return make


MANIFEST_LISTS = ("entries", "not_exported")  # what export_all appends to op by op


def _merge_exports(parts: list, out):
    """The export folders of single ops, in spec.OPS order, as one folder: what export_all of
    every op writes (the same files, the manifest's lists concatenated in the same order)."""
    manifests = [json.loads((part / "manifest.json").read_text()) for part in parts]
    merged = {**manifests[0], **{key: [] for key in MANIFEST_LISTS}}
    for part, manifest in zip(parts, manifests):
        rest = {k: v for k, v in manifest.items() if k not in MANIFEST_LISTS}
        assert rest == {k: v for k, v in merged.items() if k not in MANIFEST_LISTS}, (
            f"{part / 'manifest.json'}: expected the same header as the other ops' exports "
            f"({sorted(merged)}), got {rest}")
        for key in MANIFEST_LISTS:
            merged[key] += manifest[key]
        shutil.copytree(part, out, dirs_exist_ok=True, ignore=shutil.ignore_patterns("manifest.json"))
    (out / "manifest.json").write_text(json.dumps(merged, indent=1))
    return out


@pytest.fixture(scope="session")
def export_dir(run_once):  # noqa: F811  (run_once: the fixture imported above)
    """Every op exported at opset 18, one op at a time so that pytest-xdist workers export different
    ops at once: each worker first makes the ops nobody is making, then waits for the rest. Tests
    only read the folder."""
    import opforge_spec

    parts = {}
    for wait in (False, True):
        for name in opforge_spec.OPS:
            made = parts.get(name) or run_once(f"export-{name}", _export_one_op(name), wait=wait)
            if made is not BUSY:
                parts[name] = made
    return run_once("export", lambda out: _merge_exports([parts[n] for n in opforge_spec.OPS], out))


@pytest.fixture(scope="session")
def ort_library():
    from opforge_align.harness import ort_check

    library = ort_check.library_path()
    if not library:
        pytest.skip("opforge_ort is not installed (pip install ./packages/ort_plugin)")
    return library


@pytest.fixture(scope="session")
def ort_run(export_dir, ort_library, run_once):  # noqa: F811  (run_once: the fixture imported above)
    from opforge_align.harness import ort_check

    def check(out):
        results = ort_check.check_folder(export_dir, out, library=ort_library)
        results.write(out, "ort_results", "layer 2")
        return out, results
    return run_once("ort", check)
