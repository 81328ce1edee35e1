"""Expansion of profiles into cells: the rules as data, settings, keys for reuse."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from ci import model as mx
from ci.model.values import CONDITION

GOLDEN = Path(__file__).resolve().parent / "golden"


def cell(matrix, **values):
    cells, excluded = mx.expand(matrix, "full")
    for item in cells + excluded:
        if all(item.values[k] == v for k, v in values.items()):
            return item
    raise LookupError(values)


def test_host_profile_covers_the_acceptance_axes(matrix):
    cells, _ = mx.expand(matrix, "host")
    for axis, at_least in (("torch", 2), ("toolkit", 2), ("arch_list", 2), ("opset", 3), ("ort", 3)):
        assert len({c.values[axis] for c in cells}) >= at_least, axis


def test_torch_cuda_major_must_match_the_toolkit(matrix):
    excluded = cell(matrix, torch="2.14.1", toolkit="cuda-12.4-trixie")
    assert isinstance(excluded, mx.Excluded)
    assert excluded.rule == "torch-cuda-major"
    assert isinstance(cell(matrix, torch="2.10.0", toolkit="cuda-12.4-trixie", arch_list="8.0;9.0"),
                      mx.Cell)


def test_cpu_torch_goes_with_any_toolkit(matrix):
    for toolkit in matrix.axes["toolkit"]:
        assert isinstance(cell(matrix, torch="2.13.0", toolkit=toolkit, arch_list="8.0;9.0"), mx.Cell)


def test_sm120_needs_cuda_12_8(matrix):
    excluded = cell(matrix, torch="2.13.0", toolkit="cuda-12.4-trixie", arch_list="8.6;8.9;12.0")
    assert excluded.rule == "arch-list-toolkit"


@pytest.mark.parametrize("opset, ort, admitted", [(21, "1.17.3", False), (20, "1.17.3", True),
                                                  (21, "1.20.1", True), (17, "1.17.3", True)])
def test_opset_needs_an_ort_that_implements_it(matrix, opset, ort, admitted):
    found = cell(matrix, torch="2.13.0", toolkit="cuda-13.0-system", arch_list="8.0;9.0",
                 opset=str(opset), ort=ort)
    assert isinstance(found, mx.Cell) is admitted
    if not admitted:
        assert found.rule == "opset-needs-ort"
        assert found.condition == "ort >= $opset.min_ort"


@pytest.mark.parametrize("ort, numpy, ir_version", [("1.17.3", "1.26.4", 8), ("1.20.1", "1.26.4", 0),
                                                    ("1.32.0", None, 0)])
def test_old_ort_settings_come_from_rules(matrix, ort, numpy, ir_version):
    found = cell(matrix, torch="2.13.0", toolkit="cuda-13.0-system", arch_list="8.0;9.0",
                 opset="17", ort=ort)
    assert found.settings["numpy"] == numpy
    assert found.settings["ir_version"] == ir_version


def test_conditions():
    axes = {"torch": {"2.14.1": {"cuda": "13.0"}, "2.13.0": {"cuda": None}},
            "ort": {"1.17.3": {}, "1.9.0": {}}, "tensorrt": {"10.14": {"cuda_majors": ["12", "13"]}},
            "toolkit": {"t": {"cuda": "13.0"}}}
    values = {"torch": "2.14.1", "ort": "1.17.3", "tensorrt": "10.14", "toolkit": "t"}

    def check(text, vals=values):
        found = CONDITION.match(text)
        op = found["op"] or found["unary"]
        return mx.holds(mx.Condition(found["attr"], op, found["operand"], text), axes, vals)

    assert check("ort >= 1.9")          # versions compare numerically, not as text
    assert not check("ort < 1.9")
    assert check("torch.cuda set")
    assert check("torch.cuda unset", {**values, "torch": "2.13.0"})
    assert check("toolkit.cuda.major == $torch.cuda.major")
    assert check("toolkit.cuda.major in $tensorrt.cuda_majors")
    assert not check("toolkit.cuda.major == $torch.cuda.major", {**values, "torch": "2.13.0"})


def test_stage_keys_drop_the_toolkit_for_a_cpu_build(matrix):
    cells, _ = mx.expand(matrix, "host")
    cpu = [c for c in cells if c.values["torch"] == "2.13.0"]
    cuda = [c for c in cells if c.values["torch"] == "2.14.1"]
    assert len({mx.stage_key(matrix, "build-torch", c) for c in cpu}) == 1
    assert len({mx.stage_key(matrix, "build-torch", c) for c in cuda}) == 4   # toolkits x arch lists
    assert len({mx.stage_key(matrix, "build-ort", c) for c in cells}) == 4
    assert len({mx.stage_key(matrix, "build-loader", c) for c in cells}) == 1


def test_keys_inherit_from_inputs_and_settings(matrix):
    cells, _ = mx.expand(matrix, "host")
    unit_ort = dict(mx.stage_key(matrix, "unit-ort", cells[0]))
    assert {"ort", "toolkit", "arch_list"} <= set(unit_ort)   # the build it tests is in its key
    assert "torch" not in unit_ort and "opset" not in unit_ort


def test_key_own_leaves_out_the_build_variant(matrix):
    cells, _ = mx.expand(matrix, "host")
    align = dict(mx.stage_key(matrix, "align", cells[0]))
    assert set(align) == {"stage", "torch", "opset", "ort", "setting.ir_version"}
    assert len({mx.stage_key(matrix, "export", c) for c in cells}) == 2 * 3   # torch x opset


def test_filters(matrix):
    filters = mx.parse_filters(["torch=2.14.1", "ort=1.17.3,1.20.1"], matrix)
    cells, _ = mx.expand(matrix, "host")
    kept = [c for c in cells if c.matches(filters)]
    assert kept and all(c.values["torch"] == "2.14.1" and c.values["ort"] != "1.32.0" for c in kept)
    with pytest.raises(mx.MatrixError, match="--only: 'gpu=1': expected AXIS=VALUE"):
        mx.parse_filters(["gpu=1"], matrix)


@pytest.mark.parametrize("profile", ["host", "ci-gpu", "full"])
def test_golden_cells(matrix, profile):
    """The expansion is pinned; refresh on purpose: OPFORGE_UPDATE_GOLDEN=1 pytest tests/ci."""
    cells, excluded = mx.expand(matrix, profile)
    text = "\n".join([c.id + "  " + " ".join(f"{k}={v}" for k, v in c.settings.items())
                      for c in cells] + [f"excluded {e.id}: {e.rule}" for e in excluded]) + "\n"
    golden = GOLDEN / f"cells-{profile}.txt"
    if os.environ.get("OPFORGE_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert golden.read_text() == text, f"{golden.name} differs: if intended, OPFORGE_UPDATE_GOLDEN=1"


# ------------------------------------------------------------------- a profile's `exclude:` list

PAIRS = [{"toolkit": "cuda-13.0-system", "arch_list": "8.6;8.9;12.0", "why": "paired"},
         {"toolkit": "cuda-13.0-pypi", "arch_list": "8.0;9.0", "why": "paired"}]


def test_an_exclusion_leaves_out_every_cell_matching_the_axes_it_names(mutated):
    before, _ = mx.expand(mx.parse(mutated), "host")
    mutated["profiles"]["host"]["exclude"] = PAIRS
    matrix = mx.parse(mutated)
    cells, excluded = mx.expand(matrix, "host")
    pairs = {(c.values["toolkit"], c.values["arch_list"]) for c in cells}
    assert pairs == {("cuda-13.0-system", "8.0;9.0"), ("cuda-13.0-pypi", "8.6;8.9;12.0")}
    assert len(cells) == len(before) // 2
    left_out = [e for e in excluded if e.rule.startswith("profiles.host.exclude")]
    assert len(left_out) == len(before) - len(cells)
    first = next(e for e in left_out if e.values["toolkit"] == "cuda-13.0-system")
    assert first.rule == "profiles.host.exclude[0]" and first.why == "paired"
    assert first.condition == "toolkit == cuda-13.0-system, arch_list == 8.6;8.9;12.0"
    assert first.by == "profiles.host.exclude[0]"
    rule_made = next(e for e in excluded if e.rule == "opset-needs-ort")
    assert rule_made.by == "rule opset-needs-ort"


def refused(data) -> str:
    with pytest.raises(mx.MatrixError) as caught:
        mx.parse(data)
    return str(caught.value)


def test_an_exclusion_must_name_a_value_of_its_profile_and_say_why(mutated):
    has = mutated["profiles"]["host"]["torch"]
    other = next(v for v in mutated["torch"] if v not in has)
    mutated["profiles"]["host"]["exclude"] = [{"torch": other, "why": "x"}]
    assert refused(mutated) == (f"matrix.yaml: profiles.host.exclude[0].torch: {other}: not a torch "
                                f"value of this profile (it has {', '.join(has)})")
    mutated["profiles"]["host"]["exclude"] = [{"torch": "2.13.0"}]
    assert "why" in refused(mutated)
    mutated["profiles"]["host"]["exclude"] = [{"why": "nothing named"}]
    assert "name at least one axis" in refused(mutated)
    mutated["profiles"]["host"]["exclude"] = [{"python": "3.11", "why": "x"}]
    assert "python" in refused(mutated)


def test_a_value_every_exclusion_leaves_out_is_refused_naming_the_exclusion(mutated):
    newest = mutated["profiles"]["host"]["torch"][-1]
    mutated["profiles"]["host"]["exclude"] = [{"torch": newest, "why": "not today"}]
    assert refused(mutated) == (f"matrix.yaml: profiles.host.torch: {newest}: no cell admits it "
                                 "(profiles.host.exclude[0]: not today)")
