"""A corrupted matrix.yaml fails at once with one line: `matrix.yaml: <key path>: <problem>`."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ci import model as mx

REPO = Path(__file__).resolve().parents[2]
FROZEN = Path(__file__).resolve().parent / "golden" / "matrix.yaml"


def error_of(data) -> str:
    with pytest.raises(mx.MatrixError) as caught:
        mx.parse(data)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("matrix.yaml: ")
    return message


def test_the_frozen_matrix_is_valid(matrix):
    assert {"host", "ci-gpu", "full"} <= set(matrix.profiles)


def test_yaml_syntax_error_names_the_line():
    text = FROZEN.read_text().replace("torch:\n  \"2.13.0\"", "torch:\n \"2.13.0\": [", 1)
    with pytest.raises(mx.MatrixError) as caught:
        mx.read_yaml(text)
    assert str(caught.value).startswith("matrix.yaml: line ")
    assert "YAML syntax error" in str(caught.value)


def test_duplicate_key_is_an_error():
    with pytest.raises(mx.MatrixError, match=r"matrix.yaml: line 3: duplicate key 'a' \(first on line 2\)"):
        mx.read_yaml("x: 1\na: 1\na: 2\n")


def test_unknown_section(mutated):
    mutated["axes"] = {}
    assert error_of(mutated).startswith("matrix.yaml: axes: unknown section")


def test_unknown_axis_in_profile(mutated):
    mutated["profiles"]["host"]["cuda"] = ["13.0"]
    assert error_of(mutated).startswith("matrix.yaml: profiles.host.cuda: unknown axis or key")


def test_unknown_value_in_profile(mutated):
    mutated["profiles"]["host"]["torch"] = ["2.13.0", "2.99.0"]
    assert error_of(mutated) == ("matrix.yaml: profiles.host.torch: 2.99.0: unknown torch value "
                                 "(known: 2.13.0, 2.14.1, 2.10.0)")


def test_unquoted_version_read_as_a_number(mutated):
    mutated["ort"][1.2] = {"packages": ["onnxruntime==1.20.0"]}
    assert error_of(mutated) == ('matrix.yaml: ort.1.2: expected a version such as "1.17.3", got '
                                 "float 1.2")


def test_profile_that_admits_no_cell(mutated):
    mutated["profiles"]["host"]["opset"] = [21]
    mutated["profiles"]["host"]["ort"] = ["1.17.3"]
    assert error_of(mutated) == ("matrix.yaml: profiles.host: admits no cell (every combination "
                                 "is excluded by opset-needs-ort)")


def test_value_that_no_rule_admits(mutated):
    mutated["profiles"]["host"]["toolkit"] = ["cuda-13.0-system", "cuda-12.4-trixie"]
    mutated["profiles"]["host"]["torch"] = ["2.14.1"]
    message = error_of(mutated)
    assert message.startswith("matrix.yaml: profiles.host.toolkit: cuda-12.4-trixie: no cell admits it")
    assert "torch-cuda-major" in message


def test_rule_referencing_unknown_axis(mutated):
    mutated["rules"][0]["require"] = ["cuda.major == $torch.cuda.major"]
    assert error_of(mutated) == ("matrix.yaml: rules.torch-cuda-major.require[0]: cuda.major: "
                                 "unknown axis 'cuda' (axes: toolkit, torch, arch_list, opset, "
                                 "ort, tensorrt)")


def test_rule_referencing_unknown_property(mutated):
    mutated["rules"][2]["require"] = ["ort >= $opset.max_ort"]
    assert "opset.max_ort: no opsets value has a property 'max_ort'" in error_of(mutated)


def test_rule_with_unreadable_condition(mutated):
    mutated["rules"][2]["require"] = ["ort newer than 1.18"]
    assert "cannot read condition 'ort newer than 1.18'" in error_of(mutated)


def test_rule_setting_unknown_setting(mutated):
    mutated["rules"][-1]["set"] = {"ir": 8}
    assert error_of(mutated).startswith("matrix.yaml: rules.old-ort-ir-version.set.ir: unknown setting")


def test_rule_without_why(mutated):
    del mutated["rules"][0]["why"]
    assert error_of(mutated) == "matrix.yaml: rules.torch-cuda-major.why: every rule says why it exists"


def test_stage_placeholder_must_be_a_dependency(mutated):
    mutated["stages"]["export"]["depends"] = ["torch"]
    assert error_of(mutated).startswith("matrix.yaml: stages.export.depends: the command reads {opset}")


def test_stage_after_must_be_earlier(mutated):
    mutated["stages"]["build-torch"]["after"] = ["wheel"]
    assert error_of(mutated) == ("matrix.yaml: stages.build-torch.after[0]: 'wheel': expected an "
                                 "earlier stage (earlier: none)")


def test_unknown_stage_key(mutated):
    mutated["stages"]["bench"]["timeout"] = 5
    assert error_of(mutated).startswith("matrix.yaml: stages.bench.timeout: unknown key")


def test_toolkit_errors_use_the_same_shape(mutated):
    mutated["toolkits"]["cuda-13.0-pypi"]["cuda"] = 13.0
    assert error_of(mutated).startswith("matrix.yaml: toolkits.cuda-13.0-pypi.cuda: expected")


def test_suite_names_known_values(mutated):
    mutated["suite"]["ort"] = "1.0"
    assert error_of(mutated) == "matrix.yaml: suite.ort: '1.0': unknown ort value"


def test_check_command_fails_with_one_line(tmp_path):
    broken = tmp_path / "matrix.yaml"
    broken.write_text(FROZEN.read_text().replace('ort: ["1.17.3", "1.20.1", "1.32.0"]',
                                                                  'ort: ["1.17.3", "1.20.1", "9.9"]'))
    done = subprocess.run([sys.executable, "-m", "ci.matrix", "--matrix", str(broken), "check"],
                          capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "matrix.yaml: profiles.host.ort: 9.9: unknown ort value (known: 1.17.3, 1.20.1, 1.24.4, 1.32.0)"]


def test_matrix_session_refuses_a_corrupted_file_before_running(tmp_path, monkeypatch):
    from ci.engine import runner

    broken = tmp_path / "matrix.yaml"
    broken.write_text("profiles: [\n")
    monkeypatch.setattr(mx, "MATRIX", broken)
    monkeypatch.setattr(mx.load, "__defaults__", (broken,))
    assert runner.main(["--out", str(tmp_path / "out")]) == 2
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("why", ["", "   ", "\t\n"])
def test_an_exclusion_with_a_blank_why_is_refused(mutated, why):
    mutated["profiles"]["host"]["exclude"] = [{"torch": "2.13.0", "why": why}]
    assert error_of(mutated) == ("matrix.yaml: profiles.host.exclude[0].why: expected text saying "
                                 f"why (not blank), got {why!r}")


def test_a_blank_rule_why_is_refused(mutated):
    mutated["rules"][0]["why"] = "   "
    assert error_of(mutated) == "matrix.yaml: rules.torch-cuda-major.why: every rule says why it exists"
