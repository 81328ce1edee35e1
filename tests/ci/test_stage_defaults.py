"""matrix.yaml `stage_defaults:`: a stage with `defaults: NAME` takes every key of
stage_defaults.NAME it does not set itself; the expanded stages are what the stages would be with
those keys written out (the live file's suite stages use them)."""
from __future__ import annotations

import pytest

from ci import model as mx
from ci.model.errors import show

SUITE = {"kind": "pytest", "venv": "torch", "cache": "run", "depends": ["torch"],
         "after": ["build-torch"], "tools": ["pyyaml"]}


def with_defaults(raw, **stage):
    raw["stage_defaults"] = {"suite": dict(SUITE)}
    raw["stages"]["suite-x"] = {"defaults": "suite", **stage}
    return raw


def refusal(raw) -> str:
    with pytest.raises(mx.MatrixError) as caught:
        mx.parse(raw)
    return str(caught.value)


def test_a_stage_takes_the_defaults_it_does_not_set(mutated):
    stage = mx.parse(with_defaults(mutated, tests="tests/ci")).stages["suite-x"]
    assert (stage.kind, stage.venv, stage.cache, stage.tests) == ("pytest", "torch", "run", "tests/ci")
    assert stage.after == ("build-torch",) and stage.tools == ("pyyaml",)


def test_its_own_keys_win(mutated):
    stage = mx.parse(with_defaults(mutated, tests="tests/ci", tools=["packaging"])).stages["suite-x"]
    assert stage.tools == ("packaging",)


def test_it_equals_the_stage_written_out(mutated):
    written = {**SUITE, "tests": "tests/ci"}
    mutated["stages"]["suite-y"] = written
    matrix = mx.parse(with_defaults(mutated, tests="tests/ci"))
    assert matrix.stages["suite-x"].__dict__ | {"name": ""} == \
        matrix.stages["suite-y"].__dict__ | {"name": ""}


def test_an_unknown_defaults_name_is_refused(mutated):
    raw = with_defaults(mutated, tests="tests/ci")
    raw["stages"]["suite-x"]["defaults"] = "nope"
    assert refusal(raw) == ("matrix.yaml: stages.suite-x.defaults: expected a key of "
                            "stage_defaults (known: suite), got 'nope'")


def test_an_unknown_key_in_the_defaults_is_refused(mutated):
    raw = with_defaults(mutated, tests="tests/ci")
    raw["stage_defaults"]["suite"]["timeout"] = 5
    assert refusal(raw).startswith("matrix.yaml: stage_defaults.suite.timeout: unknown key "
                                   "(known: kind, package,")


def test_a_bad_value_in_the_defaults_is_named_where_it_is_written(mutated):
    raw = with_defaults(mutated, tests="tests/ci")
    raw["stage_defaults"]["suite"]["kind"] = "nonsense"
    assert refusal(raw) == ("matrix.yaml: stage_defaults.suite.kind: expected one of build, "
                            "pytest, script, wheel, got 'nonsense'")


def test_an_unknown_stage_in_the_defaults_is_named_where_it_is_written(mutated):
    raw = with_defaults(mutated, tests="tests/ci")
    raw["stage_defaults"]["suite"]["after"] = ["no-such-stage"]
    assert refusal(raw).startswith("matrix.yaml: stage_defaults.suite.after[0]: 'no-such-stage': "
                                   "expected a stage name (known: build-torch,")


def test_a_default_wrong_for_one_stage_is_named_at_the_defaults_for_that_stage(mutated):
    raw = with_defaults(mutated, tests="tests/ci")
    raw["stages"] = {"suite-x": raw["stages"].pop("suite-x"), **raw["stages"]}   # before build-torch
    assert refusal(raw) == ("matrix.yaml: stage_defaults.suite.after[0]: 'build-torch': expected "
                            "an earlier stage (earlier: none) (taken by stages.suite-x)")


def test_a_stages_own_bad_value_is_still_named_at_the_stage(mutated):
    raw = with_defaults(mutated, tests="tests/ci", after=["no-such-stage"])
    assert refusal(raw).startswith("matrix.yaml: stages.suite-x.after[0]: 'no-such-stage': "
                                   "expected an earlier stage")


def test_a_group_no_stage_uses_is_validated_too(mutated):
    raw = with_defaults(mutated, tests="tests/ci")
    raw["stage_defaults"]["spare"] = {"kind": "nonsense"}
    assert refusal(raw) == ("matrix.yaml: stage_defaults.spare.kind: expected one of build, "
                            "pytest, script, wheel, got 'nonsense'")


def test_an_unknown_tool_in_an_unused_group_is_refused(mutated):
    raw = with_defaults(mutated, tests="tests/ci")
    raw["stage_defaults"]["spare"] = {"tools": ["no-such-tool"]}
    assert refusal(raw).startswith("matrix.yaml: stage_defaults.spare.tools[0]: 'no-such-tool': "
                                   "not a key of tools:")


@pytest.mark.parametrize("group", [5, "pytest", ["kind", "pytest"], None])
def test_a_group_that_is_not_a_mapping_is_named_as_such(mutated, group):
    raw = with_defaults(mutated, tests="tests/ci")
    raw["stage_defaults"]["suite"] = group
    message = refusal(raw)
    assert message.startswith("matrix.yaml: stage_defaults.suite: expected a mapping with the "
                              "keys kind, package,"), message
    assert message.endswith(f", got {show(group)}"), message


def test_stage_defaults_that_is_not_a_mapping_is_named_as_such(mutated):
    raw = with_defaults(mutated, tests="tests/ci")
    raw["stage_defaults"] = ["suite"]
    assert refusal(raw) == ("matrix.yaml: stage_defaults: expected a mapping of names to stage "
                            "keys, got list ['suite']")


def test_the_live_suite_stages_use_the_defaults():
    live = mx.load()
    assert "suite" in live.data["stage_defaults"]
    uses = [name for name, spec in live.data["stages"].items() if spec.get("defaults") == "suite"]
    assert len(uses) >= 10
    for name in uses:
        assert live.stages[name].cache == "run" and live.stages[name].venv == "torch"
