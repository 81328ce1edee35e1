"""opforge-align: compare any ONNX model - custom ops included - across runtimes, tensor by
tensor, against a float64 reference (`opforge-align run MODEL.onnx --all-tensors`).

    from opforge_align import Options, run
    report = run("model.onnx", Options(runtimes=["ort", "reference"], all_tensors=True))
    report.ok, report.first_divergence

`opforge_align.harness` holds the CI's alignment of opforge's own ops (layers 1-2, cross-version).
"""
from __future__ import annotations

from .align import Options, Report, TensorResult, run
from .errors import AlignError

__version__ = "0.1.0"
__all__ = ["AlignError", "Options", "Report", "TensorResult", "run"]
