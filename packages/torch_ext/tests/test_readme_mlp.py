"""The README's "fast way" to put SwiGLU into a model runs as written and exports what it says."""
import re
from pathlib import Path

import onnx
import pytest

README = Path(__file__).resolve().parents[3] / "README.md"
HEADING = "## Putting SwiGLU into a model: the fast way"


def _section_code() -> str:
    text = README.read_text()
    if HEADING not in text:
        pytest.fail(f"README.md: expected the section {HEADING!r}")
    section = text.split(HEADING, 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1, f"{HEADING}: expected one ```python block, found {len(blocks)}"
    return blocks[0]


def test_readme_gated_mlp_runs_and_exports_one_swiglu_node(tmp_path, monkeypatch):
    pytest.importorskip("onnxscript")
    monkeypatch.chdir(tmp_path)
    exec(compile(_section_code(), f"{README}: {HEADING}", "exec"), {"__name__": "readme"})
    nodes = onnx.load(tmp_path / "mlp.onnx").graph.node
    assert [n.op_type for n in nodes if n.domain == "opforge"] == ["SwiGLU"]
    assert sum(n.op_type == "MatMul" for n in nodes) == 2
