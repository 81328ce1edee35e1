"""matrix.yaml `stage_defaults:`: a stage with `defaults: NAME` takes every key of
stage_defaults.NAME it does not set itself; the expanded stages are what the stages would be with
those keys written out (the live file's suite stages use them)."""
from __future__ import annotations

import pytest

from ci import model as mx

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


def test_a_bad_value_from_the_defaults_is_named_at_the_stage(mutated):
    raw = with_defaults(mutated, tests="tests/ci")
    raw["stage_defaults"]["suite"]["after"] = ["no-such-stage"]
    assert refusal(raw).startswith("matrix.yaml: stages.suite-x.after[0]: 'no-such-stage'")


def test_the_live_suite_stages_use_the_defaults():
    live = mx.load()
    assert "suite" in live.data["stage_defaults"]
    uses = [name for name, spec in live.data["stages"].items() if spec.get("defaults") == "suite"]
    assert len(uses) >= 10
    for name in uses:
        assert live.stages[name].cache == "run" and live.stages[name].venv == "torch"
