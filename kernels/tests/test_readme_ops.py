"""Every README names the operators the spec has, in the spec's order, in one marked list
(`<!-- ops -->...<!-- /ops -->`): the top README, each package's and bench's. An op added to the
spec fails this test until every README names it (the top README said "the three operators" when
there were five)."""
import re
from pathlib import Path

import pytest

import opforge_spec as spec

REPO = Path(__file__).resolve().parents[2]
# Every README a user reads about what opforge ships (a new package's README joins by itself).
READMES = sorted(["README.md", "bench/README.md",
                  *(str(p.relative_to(REPO)) for p in REPO.glob("packages/*/README.md"))])
# READMEs whose list names the torch entry points (torch.ops.opforge.<torch_name>) as well
TORCH_NAMED = {"packages/torch_ext/README.md"}
BLOCK = re.compile(r"<!-- ops -->(.*?)<!-- /ops -->", re.S)


def ops_block(text: str) -> str:
    """The one marked list of ops; an error naming what is wrong when there is none or several."""
    blocks = BLOCK.findall(text)
    if len(blocks) != 1:
        raise AssertionError(f"expected one `<!-- ops -->...<!-- /ops -->` list of the spec's ops, "
                             f"got {len(blocks)}")
    return blocks[0]


def named_in_order(block: str, names: list) -> list:
    """The names the block mentions (whole words: RMSNorm is not found inside AddRMSNorm), in
    the order it first mentions them."""
    found = {name: m.start() for name in names
             if (m := re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", block))}
    return sorted(found, key=found.get)


def missing_or_unordered(block: str, names: list) -> str:
    """"" when the block names every one of `names` in that order, else what is off."""
    got = named_in_order(block, names)
    missing = [n for n in names if n not in got]
    if missing:
        return f"missing {', '.join(missing)}"
    return "" if got == names else f"order {', '.join(got)} (the spec's: {', '.join(names)})"


@pytest.mark.parametrize("readme", READMES)
def test_each_readme_lists_every_op_of_the_spec(readme):
    block = ops_block((REPO / readme).read_text())
    wanted = [[op.name for op in spec.OPS.values()]]
    if readme in TORCH_NAMED:
        wanted.append([op.torch_name for op in spec.OPS.values()])
    problems = [p for names in wanted if (p := missing_or_unordered(block, names))]
    assert not problems, f"{readme}: its ops list (<!-- ops -->): {'; '.join(problems)}"


def test_the_check_names_a_missing_or_misplaced_op():
    names = ["Swish", "RMSNorm", "AddRMSNorm", "RMSNormQuant"]
    assert missing_or_unordered("`Swish`, `RMSNorm`, `AddRMSNorm`", names) == "missing RMSNormQuant"
    assert missing_or_unordered("AddRMSNorm, Swish, RMSNorm, RMSNormQuant", names).startswith("order")
    assert missing_or_unordered("Swish RMSNorm AddRMSNorm RMSNormQuant", names) == ""
    with pytest.raises(AssertionError, match="got 0"):
        ops_block("no list here")


def _what_opforge_is() -> str:
    text = (REPO / "README.md").read_text()
    return text[text.index("## What opforge is"):text.index("## Quick start")]


def test_the_torch_row_names_every_entry_point():
    row = next(line for line in _what_opforge_is().splitlines()
               if line.startswith("| `packages/torch_ext`"))
    named = re.findall(r"`(?:torch\.ops\.opforge\.)?(\w+)`", row.split("|")[2])
    assert named[:len(spec.OPS)] == [op.torch_name for op in spec.OPS.values()]
