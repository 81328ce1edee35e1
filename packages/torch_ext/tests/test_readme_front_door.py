"""The README's front door, "HF model -> opforge -> ONNX -> ORT -> opforge-align", runs as written:
its one ```python block is executed (so the README cannot rot), and what it says it prints and
exports is checked."""
import os
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[3] / "README.md"
HEADING = "### A Hugging Face model: HF → opforge → ONNX → ORT → opforge-align"
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # random weights only: never reach the hub


def front_door_code() -> str:
    """The one ```python block of the section."""
    text = README.read_text()
    if HEADING not in text:
        pytest.fail(f"README.md: expected the section {HEADING!r}", pytrace=False)
    section = re.split(r"\n#{2,3} ", text.split(HEADING, 1)[1], maxsplit=1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1, f"{HEADING}: expected one ```python block, found {len(blocks)}"
    return blocks[0]


def _requirements() -> None:
    """transformers, opforge_ort and opforge_align, or a skip naming what is missing; a failure where
    transformers must be there (OPFORGE_REQUIRE_TRANSFORMERS=1, as in test_hf_patch.py)."""
    try:
        import transformers  # noqa: F401
    except ImportError as err:
        if os.environ.get("OPFORGE_REQUIRE_TRANSFORMERS") == "1":
            pytest.fail(f"OPFORGE_REQUIRE_TRANSFORMERS=1 but transformers does not import: {err}",
                        pytrace=False)
        pytest.skip("transformers is not installed (pip install transformers)")
    for module in ("onnxruntime", "opforge_ort", "opforge_align"):
        pytest.importorskip(module)


def test_the_front_door_runs_as_written(tmp_path, monkeypatch, capsys):
    code = front_door_code()
    _requirements()
    monkeypatch.chdir(tmp_path)
    exec(compile(code, f"{README}: {HEADING}", "exec"), {"__name__": "readme"})
    printed = capsys.readouterr().out.splitlines()
    assert "opforge-align: every tensor agrees" in printed
    assert ("{'LlamaDecoderLayer -> AddRMSNorm': 2, 'LlamaRMSNorm -> RMSNorm': 3, "
            "'LlamaMLP -> SwiGLU': 2}") in printed

    import onnx

    nodes = [n.op_type for n in onnx.load(tmp_path / "llama.onnx").graph.node if n.domain == "opforge"]
    assert sorted(nodes) == ["AddRMSNorm"] * 2 + ["RMSNorm"] * 3 + ["SwiGLU"] * 2  # as the README says


def test_the_front_door_is_about_ten_lines_and_downloads_nothing():
    code = front_door_code()
    lines = [line for line in code.splitlines() if line.strip()]
    assert len(lines) <= 15, f"{HEADING}: {len(lines)} lines of code; the front door is about ten"
    assert "from_pretrained" not in code  # a tiny config with random weights: nothing to download
