"""Cross-version: the same export folder in several ONNX Runtime releases.

With OPFORGE_ALIGN_ORT_PYTHONS="/venv-a/bin/python:/venv-b/bin/python" (venvs holding another
onnxruntime and opforge_ort) the real comparison runs; without, the comparison is exercised on two
copies of this venv's run, one of them with a planted 1-ulp error."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _package import SOURCES

from opforge_align.harness import cross

ALIGN = SOURCES / "opforge_align" / "__main__.py"  # another venv: this tree's sources


def relabel(src: Path, dst: Path, version: str) -> Path:
    shutil.copytree(src, dst)
    data = json.loads((dst / "ort_results.json").read_text())
    data["context"]["onnxruntime"] = version
    (dst / "ort_results.json").write_text(json.dumps(data))
    return dst


def test_identical_runs_agree(ort_run, tmp_path):
    out, _ = ort_run
    results = cross.compare([relabel(out, tmp_path / "a", "1.0.0"), relabel(out, tmp_path / "b", "2.0.0")])
    assert results.checks and not results.failed


def test_one_ulp_in_one_release_is_caught(ort_run, tmp_path):
    out, _ = ort_run
    a, b = relabel(out, tmp_path / "a", "1.0.0"), relabel(out, tmp_path / "b", "2.0.0")
    target = next((b / "outputs").glob("Swish.float32.r2.default.custom-ts.npz"))
    data = dict(np.load(target))
    data["random"] = np.nextafter(data["random"], np.float32(np.inf))
    np.savez(target, **data)
    failed = cross.compare([a, b]).failed
    assert [(c.case, c.rule) for c in failed] == [("random", "bitwise equal")]


def test_across_installed_releases(export_dir, tmp_path):
    pythons = [p for p in os.environ.get("OPFORGE_ALIGN_ORT_PYTHONS", "").split(":") if p]
    if not pythons:
        pytest.skip("set OPFORGE_ALIGN_ORT_PYTHONS to venv pythons of other ONNX Runtime releases")
    runs = []
    for i, python in enumerate([sys.executable, *pythons]):
        runs.append(tmp_path / f"ort{i}")
        # IR 8: ORT < 1.18 refuses newer files; the graphs need nothing newer
        subprocess.run([python, str(ALIGN), "layer2", "--models", str(export_dir),
                        "--ir-version", "8", "--out", str(runs[-1])], check=False)
    results = cross.compare(runs)
    assert not results.failed, "\n".join(f"{c.subject} {c.case}: {c.detail}" for c in results.failed)
