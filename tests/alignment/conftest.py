"""Shared fixtures: one export folder and one ONNX Runtime run per test session (exports are the
slow part)."""
from __future__ import annotations

import _package  # noqa: F401  (opforge_align: installed, else packages/align/src)
import pytest
from opforge_align.harness.stage import fault_arg  # noqa: F401  (fails early if it is broken)

torch = pytest.importorskip("torch", reason="the torch side of the alignment needs torch")
pytest.importorskip("opforge_torch", reason="opforge_torch is not installed")
pytest.importorskip("onnxruntime", reason="layer 2 needs onnxruntime")


def pytest_configure(config):
    # onnx's reference Sigmoid/Div warn on the NaN/Inf/1e4 cases (expected), the exporters on
    # their own deprecations: neither is about opforge.
    for line in ("ignore::RuntimeWarning:onnx", "ignore::DeprecationWarning",
                 "ignore::FutureWarning", "ignore::UserWarning:torch"):
        config.addinivalue_line("filterwarnings", line)


@pytest.fixture(scope="session")
def export_dir(tmp_path_factory):
    from opforge_align.harness import export

    out = tmp_path_factory.mktemp("export")
    export.export_all(out, opset=18)
    return out


@pytest.fixture(scope="session")
def ort_library():
    from opforge_align.harness import ort_check

    library = ort_check.library_path()
    if not library:
        pytest.skip("opforge_ort is not installed (pip install ./packages/ort_plugin)")
    return library


@pytest.fixture(scope="session")
def ort_run(export_dir, ort_library, tmp_path_factory):
    from opforge_align.harness import ort_check

    out = tmp_path_factory.mktemp("ort")
    results = ort_check.check_folder(export_dir, out, library=ort_library)
    results.write(out, "ort_results", "layer 2")
    return out, results
