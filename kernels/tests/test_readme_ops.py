"""The top-level README names the operators the spec has, in the spec's order (it said "the three
operators" when there were five)."""
import re
from pathlib import Path

import opforge_spec as spec

README = Path(__file__).resolve().parents[2] / "README.md"


def _what_opforge_is() -> str:
    text = README.read_text()
    return text[text.index("## What opforge is"):text.index("## Quick start")]


def test_the_readme_lists_every_op_of_the_spec():
    section = _what_opforge_is()
    sentence = section[section.index("The operators ("):section.index("; ONNX domain")]
    assert re.findall(r"`(\w+)`", sentence) == list(spec.OPS)


def test_the_torch_row_names_every_entry_point():
    row = next(line for line in _what_opforge_is().splitlines()
               if line.startswith("| `packages/torch_ext`"))
    named = re.findall(r"`(?:torch\.ops\.opforge\.)?(\w+)`", row.split("|")[2])
    assert named[:len(spec.OPS)] == [op.torch_name for op in spec.OPS.values()]
