"""ci/model/schema.py, the declared schema of matrix.yaml: what each section accepts (stage
slow/tests/tools/serial, cuda: required, profile stages/cpu_builds among it), and the one line a
pydantic ValidationError becomes (`matrix.yaml: <where>: <problem>`, the input and the expected)."""
from __future__ import annotations

import copy

import pytest

from ci import model as mx
from ci.model import validate


def refusal(data) -> str:
    with pytest.raises(mx.MatrixError) as caught:
        mx.parse(data)
    message = str(caught.value)
    assert "\n" not in message and message.startswith("matrix.yaml: "), message
    return message.removeprefix("matrix.yaml: ")


def test_the_frozen_matrix_is_a_matrix_file(raw):
    spec = validate.validate(raw)
    assert list(spec.stages)[:2] == ["build-torch", "build-ort"]     # file order is run order
    assert spec.axes()["opset"]["17"] == {"min_ort": "1.12"}          # opsets: numbers as keys
    assert spec.axes()["torch"]["2.13.0"] == {"cuda": None, "packages": ["torch==2.13.0"]}
    assert spec.toolkits["cuda-13.0-pypi"].source == "pypi"          # ci/model/toolkit_spec.py's spec


def test_the_matrix_carries_the_stage_and_profile_fields(matrix):
    assert matrix.stages["bench"].slow and not matrix.stages["build-torch"].slow
    assert matrix.stages["build-trt"].cuda == "required"
    suite = next(s for s in matrix.stages.values() if s.tests)
    assert suite.kind == "pytest" and suite.tests_dir == suite.tests
    assert all(tool in matrix.tools for s in matrix.stages.values() for tool in s.tools)
    assert matrix.stages["unit-ort"].tests_dir == "packages/ort_plugin/tests"
    assert any(p.cpu_builds for p in matrix.profiles.values())
    assert all(p.stages is None or "build-torch" in p.stages for p in matrix.profiles.values())


@pytest.mark.parametrize("path, key, problem", [
    ((), "axes", "unknown section (known: sources, tools, python, toolkits, torch,"),
    (("stages", "bench"), "timeout", "unknown key (known: kind, package, venv, cuda,"),
    (("profiles", "host"), "cuda", "unknown axis or key (known: description, runs_on, toolkit,"),
    (("rules", 0), "unless", "unknown key (known: id, why, when, require, set)"),
    (("ort", "1.32.0"), "cuda", "unknown key (known: packages, gpu_packages)"),
    (("suite",), "python", "unknown key (known: ort)"),
    (("sources", "ort_headers"), "url", "unknown key (known: debian_suite, package, version)"),
])
def test_every_section_refuses_unknown_keys_and_names_the_known(mutated, path, key, problem):
    target = mutated
    for part in path:
        target = target[part]
    target[key] = "x"
    where = ".".join(map(str, (*path, key))).replace("rules.0", "rules.torch-cuda-major")
    assert refusal(mutated).startswith(f"{where}: {problem}")


@pytest.mark.parametrize("path, value, problem", [
    # versions are text: YAML reads an unquoted 13 or 1.20 as a number
    (("tensorrt", "10.14", "cuda_majors"), [13], ("tensorrt.10.14.cuda_majors[0]: expected a "
     'version such as "1.17.3", got int 13')),
    (("torch", "2.14.1", "cuda"), 13.0, ('torch.2.14.1.cuda: expected a version such as "1.17.3", '
     "got float 13.0")),
    (("settings", "numpy"), 2, 'settings.numpy: expected a version such as "1.17.3", got int 2'),
    (("python", "numpy"), "2.4.6 ", "python.numpy: expected a version"),
    # strict types: no silent coercion
    (("stages", "bench", "slow"), "yes", "stages.bench.slow: expected true or false, got 'yes'"),
    (("profiles", "host", "cpu_builds"), 1, ("profiles.host.cpu_builds: expected true or false, "
     "got int 1")),
    (("stages", "bench", "env"), {"N": 1}, "stages.bench.env.N: expected text, got int 1"),
    (("profiles", "host", "description"), 5, "profiles.host.description: expected text, got int 5"),
    (("profiles", "host", "opset"), ["17"], ("profiles.host.opset[0]: expected an opset number, "
     "got '17'")),
    (("profiles", "host", "torch"), [2.13], ("profiles.host.torch[0]: YAML reads 2.13 as a number: "
     "quote it")),
    (("stages", "bench", "cuda"), "sometimes", ("stages.bench.cuda: expected one of always, never, "
     "required, torch, got 'sometimes'")),
    (("stages", "bench", "depends"), ["gpu"], ("stages.bench.depends[0]: expected one of "
     "arch_list, opset, ort, tensorrt, toolkit, torch, got 'gpu'")),
    (("arch_lists",), {"8.0;sm_90": {"min_cuda": "11.8"}}, ("arch_lists.8.0;sm_90: expected a "
     'TORCH_CUDA_ARCH_LIST such as "8.0;9.0"')),
    (("rules", 0, "when"), "torch.cuda set", ("rules.torch-cuda-major.when: expected a list of "
     "conditions, got 'torch.cuda set'")),
    (("stages", "build-torch"), None, ("stages.build-torch: expected a mapping with the keys kind, "
     "package, venv, cuda,")),
    (("suite", "ort"), None, "suite.ort: expected an ONNX Runtime release of ort:, got NoneType"),
])
def test_values_are_declared(mutated, path, value, problem):
    set_at(mutated, path, value)
    assert refusal(mutated).startswith(problem)


def set_at(data: dict, path: tuple, value) -> None:
    for part in path[:-1]:
        data = data[part]
    data[path[-1]] = value


# ------------------------------------------------- stage slow, tests, tools, serial; profile stages


def pytest_stage(**fields) -> dict:
    return {"kind": "pytest", "venv": "torch", "depends": ["torch"], "after": ["build-torch"],
            **fields}


@pytest.mark.parametrize("stage, problem", [
    (pytest_stage(tests="tests/ci"), None),                     # tests: makes package optional
    (pytest_stage(package="torch_ext"), None),
    (pytest_stage(), "stages.x.package: expected a folder name under packages/, got NoneType None"),
    (pytest_stage(tests="../elsewhere"), ("stages.x.tests: expected a folder relative to the "
     "repository without '..', got '../elsewhere'")),
    (pytest_stage(tests="/abs/tests"), "stages.x.tests: expected a folder relative"),
    (pytest_stage(tests="tests/a/../../b"), "stages.x.tests: expected a folder relative"),
    ({"kind": "script", "venv": "torch", "tests": "tests/ci", "run": ["x.py"]},
     "stages.x.tests: only a pytest stage has tests (kind: script)"),
    (pytest_stage(tests="tests/ci", tools=["pyyaml", "packaging"]), None),
    (pytest_stage(tests="tests/ci", tools=["pyyaml", "numpy"]), ("stages.x.tools[1]: 'numpy': not a "
     "key of tools: (known: nox, pyyaml,")),
    (pytest_stage(tests="tests/ci", serial="no"), "stages.x.serial: expected true or false"),
    ({"kind": "build", "package": "trt_plugin", "cuda": "required"}, None),
    ({"kind": "pytest", "tests": "tests/ci"}, ("stages.x.venv: a pytest stage runs in a venv: torch "
     "or ort")),
])
def test_stage_fields(mutated, stage, problem):
    mutated["stages"]["x"] = stage
    if problem is None:
        assert mx.parse(mutated).stages["x"].name == "x"
    else:
        assert refusal(mutated).startswith(problem)


@pytest.mark.parametrize("stages, problem", [
    (["build-torch", "unit-torch"], None),
    (["unit-torch"], ("profiles.host.stages[0]: unit-torch runs after build-torch: select "
     "build-torch too")),
    (["build-torch", "lint"], "profiles.host.stages[1]: 'lint': unknown stage (known: build-torch,"),
    (["build-torch", "build-torch"], "profiles.host.stages: duplicate value 'build-torch'"),
    ([], None),
    ("build-torch", "profiles.host.stages: expected a list of stage names, got 'build-torch'"),
])
def test_profile_stages_are_stages_closed_under_after(mutated, stages, problem):
    mutated["profiles"]["host"]["stages"] = stages
    if problem is None:
        assert mx.parse(mutated).profiles["host"].stages == tuple(stages)
    else:
        assert refusal(mutated).startswith(problem)


def test_a_profile_without_stages_runs_every_stage(mutated):
    del mutated["profiles"]["host"]["stages"]
    assert mx.parse(mutated).profiles["host"].stages is None


# ---------------------------------------------------------------- one line per problem


def test_the_first_problem_in_file_order_is_named(mutated):
    mutated["stages"]["bench"]["kind"] = "benchmark"
    mutated["tools"]["nox"] = "latest"
    assert refusal(mutated).startswith("tools.nox: expected a version")


def test_cross_references_are_checked_once_the_shapes_hold(mutated):
    mutated["stages"]["bench"]["after"] = ["nowhere"]
    mutated["stages"]["wheel"]["needs"] = ["tpu"]
    assert refusal(mutated).startswith("stages.wheel.needs[0]: expected one of gpu, "
                                       "tensorrt-runtime, got 'tpu'")


def test_a_rule_is_named_by_its_id_once_it_has_one(mutated):
    mutated["rules"][3]["require"] = ["toolkit.cuda.major in"]
    assert refusal(mutated).startswith("rules.tensorrt-cuda-major.require[0]: cannot read "
                                       "condition 'toolkit.cuda.major in'")
    mutated["rules"][3]["id"] = 7
    assert refusal(mutated).startswith("rules[3].id: expected a rule id, got int 7")


def test_a_missing_field_says_what_was_expected(mutated):
    kind = mutated["stages"]["bench"].pop("kind")
    assert refusal(mutated) == ("stages.bench.kind: missing (expected one of build, pytest, "
                                "script, wheel)")
    mutated["stages"]["bench"]["kind"] = kind
    del mutated["suite"]
    assert refusal(mutated) == "suite: missing section"


def test_an_order_comparison_of_a_value_that_is_no_version_is_refused(mutated):
    mutated["rules"].append({"id": "by-name", "why": "w", "require": ["toolkit >= 13"]})
    assert refusal(mutated).startswith("rules.by-name.require[0]: toolkit is 'cuda-13.0-system' "
                                       "for toolkits.cuda-13.0-system: >= compares versions only")


@pytest.mark.parametrize("data", [None, [], "matrix", 5, {"stages": {1: "x"}},
                                  {"tools": {"nox": ["2026.10.20"]}}, {"profiles": {"p": None}}])
def test_junk_is_one_matrix_error(data):
    with pytest.raises(mx.MatrixError):
        validate.validate(data)


@pytest.mark.parametrize("section", ["stages", "profiles"])
def test_the_name_is_the_key(mutated, section):
    first = next(iter(mutated[section]))
    mutated[section][first]["name"] = "other"
    assert refusal(mutated) == f"{section}.{first}.name: unknown key (the name is the key)"


def test_any_value_anywhere_is_valid_or_one_matrix_error(raw):
    """Each node of the frozen matrix replaced by an odd value: valid or one MatrixError, never a
    pydantic ValidationError, TypeError or KeyError (fuzz/targets/matrix_yaml goes further)."""
    odd = [None, 0, 1.5, True, "", "x y", [], {}, [None], {"k": None}, {1: 2}]
    paths = list(_paths(raw))
    for number, path in enumerate(paths):      # one odd value per node, each value in turn
        data = copy.deepcopy(raw)
        set_at(data, path, odd[number % len(odd)])
        try:
            validate.validate(data)
        except mx.MatrixError as exc:
            assert "\n" not in str(exc)
    assert len(paths) > 500


def _paths(node, at=()):
    items = node.items() if isinstance(node, dict) else \
        enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        yield (*at, key)
        yield from _paths(value, (*at, key))
