"""matrix.yaml is outside input: its size, nesting and expansion are bounded,
every version is a version and every package a pin, and each problem is ONE line, exit code 2."""
from __future__ import annotations

import copy
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ci import model as mx
from ci.model import errors

REPO = Path(__file__).resolve().parents[2]
REAL = (Path(__file__).resolve().parent / "golden" / "matrix.yaml").read_text()  # frozen


def refusal(source) -> str:
    """The one line a matrix file (text, bytes or parsed data) is refused with."""
    with pytest.raises(mx.MatrixError) as caught:
        if isinstance(source, (str, bytes)):
            mx.from_bytes(source.encode() if isinstance(source, str) else source)
        else:
            mx.parse(source)
    message = str(caught.value)
    assert "\n" not in message and message.startswith("matrix.yaml: "), message
    return message


def edited(old: str, new: str) -> str:
    assert REAL.count(old) == 1, old
    return REAL.replace(old, new)


def timed(function, *args):
    started = time.monotonic()
    result = function(*args)
    return result, time.monotonic() - started


def laughs(levels: int = 9) -> str:
    """Billion laughs: 9 levels of 9 aliases each expand to 9**9 strings."""
    lines = ['l0: &l0 "lol"']
    lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------- 11: aliases and size


def test_billion_laughs_is_refused_at_the_first_anchor():
    message, seconds = timed(refusal, laughs())
    assert message == ("matrix.yaml: line 1, column 5: YAML anchors and aliases (&name, *name) "
                       "are not allowed: write the value out")
    assert seconds < 5


def test_an_anchor_in_the_real_file_is_refused():
    text = edited('torch:\n  "2.13.0": {cuda: null, packages: [torch==2.13.0]}',
                  'torch:\n  "2.13.0": &cpu {cuda: null, packages: [torch==2.13.0]}')
    assert "YAML anchors and aliases" in refusal(text)


def test_a_merge_key_alias_is_refused():
    text = edited("  build-loader: {kind: build,", "  build-loader: {<<: *x, kind: build,")
    assert "YAML anchors and aliases" in refusal(text)


def test_a_10_mb_file_fails_in_well_under_a_second():
    data = (REAL + "#" + "x" * (10 * 1024 * 1024) + "\n").encode()
    message, seconds = timed(refusal, data)
    assert message == "matrix.yaml: more than the 256 KiB a matrix file may have"
    assert seconds < 1


def test_the_size_is_checked_before_the_bytes_are_decoded():
    assert "more than the 256 KiB" in refusal(b"\xff" * (mx.MAX_BYTES + 1))


def test_a_big_file_on_disk_is_refused_by_the_cli_at_once(tmp_path):
    big = tmp_path / "matrix.yaml"
    big.write_bytes(REAL.encode() + b"#" + b"x" * (10 * 1024 * 1024))
    done, seconds = timed(check, big)
    assert done.returncode == 2
    assert done.stderr == "matrix.yaml: more than the 256 KiB a matrix file may have\n"
    assert seconds < 5


def test_a_fifo_is_refused_without_being_opened(tmp_path):
    fifo = tmp_path / "matrix.yaml"
    os.mkfifo(fifo)
    done = check(fifo)
    assert (done.returncode, done.stderr) == (2, "matrix.yaml: cannot read: not a regular file\n")


def check(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ci.matrix", "--matrix", str(path), "check"],
                          capture_output=True, text=True, cwd=REPO, timeout=30)


# --------------------------------------------------------------- 12: values are validated


@pytest.mark.parametrize("old, new, where", [
    ('"1.17.3": {packages: [onnxruntime==1.17.3]}', '"1.17; touch x": {packages: [onnxruntime==1.17.3]}',
     "ort.1.17; touch x: expected a version"),
    ('"2.13.0": {cuda: null', '"v2.13.0": {cuda: null', "torch.v2.13.0: expected a version"),
    ('"10.14": {cuda_majors', '"10.14 ": {cuda_majors', "tensorrt.10.14 : expected a version"),
    ('"10.14": {cuda_majors: ["12", "13"]}', '"10.14": {cuda_majors: ["12", "13;x"]}',
     "tensorrt.10.14.cuda_majors[1]: expected a version"),
    ('20: {min_ort: "1.17"}', '20: {min_ort: "1.17; touch x"}', "opsets.20.min_ort: expected a version"),
    ('"8.0;9.0": {min_cuda: "11.8"}', '"8.0;9.0": {min_cuda: "11.8x"}',
     "arch_lists.8.0;9.0.min_cuda: expected a version"),
    ('"2.14.1": {cuda: "13.0"', '"2.14.1": {cuda: "13.0 && x"', "torch.2.14.1.cuda: expected a version"),
    ('"7.5;8.0;8.6;9.0": {min_cuda', '"7.5;8.0;8.6;9.0;$(x)": {min_cuda',
     "arch_lists.7.5;8.0;8.6;9.0;$(x): expected a TORCH_CUDA_ARCH_LIST"),
    ("when: [ort < 1.21]", "when: [ort < 1.21;x]", "rules.old-ort-numpy.when[0]: expected a version"),
    ('set: {numpy: "1.26.4"}', 'set: {numpy: "1.26.4 --pre"}',
     "rules.old-ort-numpy.set.numpy: expected a version"),
    ('nox: "2026.10.20"', 'nox: "2026.10.20; touch x"', "tools.nox: expected a version"),
    ('pytest: "9.0.3"', 'pytest: "--index-url=http://evil.example/simple"', "python.pytest: expected a version"),
])
def test_a_value_that_is_not_a_version_is_refused(old, new, where):
    assert f"matrix.yaml: {where}" in refusal(edited(old, new))


def test_the_reported_ort_key_no_longer_turns_the_rules_off():
    text = edited('"1.17.3": {packages: [onnxruntime==1.17.3]}',
                  '"1.17; touch x": {packages: [onnxruntime==1.17.3]}')
    assert refusal(text.replace('ort: ["1.17.3", "1.20.1", "1.32.0"]', 'ort: ["1.17; touch x"]')) \
        .startswith('matrix.yaml: ort.1.17; touch x: expected a version such as "1.17.3"')


def test_a_rule_that_cannot_compare_refuses_instead_of_admitting():
    # parse() never builds such a Matrix; a hand-built one must still not fail open.
    condition = mx.Condition("ort", "<", "1.21", "ort < 1.21")
    with pytest.raises(mx.MatrixError, match=r"ort < 1.21: cannot compare '1.17; touch x'"):
        mx.holds(condition, {"ort": {"1.17; touch x": {}}}, {"ort": "1.17; touch x"})


@pytest.mark.parametrize("entry", [
    "onnxruntime==1.17.3; touch x", "--index-url=http://evil.example/simple",
    "onnxruntime @ https://evil.example/onnxruntime.whl", "onnxruntime[cuda]==1.17.3",
    "onnxruntime>=1.17.3", "onnxruntime==1.17.*", "onnxruntime == 1.17.3", "onnxruntime===1.17.3",
    "onnxruntime==1.17.3 ; python_version > '3'", "-r requirements.txt", "onnxruntime==1.17.3,<2",
    "onnxruntime==1.17.3\n--extra-index-url=http://evil.example", 17,
])
def test_a_package_entry_must_be_an_exact_pin(mutated, entry):
    mutated["ort"]["1.17.3"]["packages"] = [entry]
    assert refusal(mutated).startswith("matrix.yaml: ort.1.17.3.packages[0]: expected an exact "
                                       "pin name==version (no options, markers, URLs, extras or spaces)")


def test_toolkit_pins_follow_the_same_rule(mutated):
    mutated["toolkits"]["cuda-13.0-pypi"]["packages"][0] = "nvidia-cuda-nvcc==13.0.88\n"
    assert refusal(mutated).startswith("matrix.yaml: toolkits.cuda-13.0-pypi.packages[0]: "
                                       "expected an exact pin")


def test_an_option_beside_a_good_pin_is_refused(mutated):
    mutated["torch"]["2.13.0"]["packages"].append("--extra-index-url=http://evil.example/simple")
    assert refusal(mutated).startswith("matrix.yaml: torch.2.13.0.packages[1]: expected an exact pin")


@pytest.mark.parametrize("axis, value, packages, problem", [
    ("ort", "1.32.0", ["onnxruntime==1.32.1"],
     "ort.1.32.0.packages: onnxruntime==1.32.1 does not match the key '1.32.0'"),
    ("torch", "2.13.0", ["torch==2.14.1"], "torch.2.13.0.packages: torch==2.14.1 does not match"),
    ("ort", "1.20.1", ["numpy==1.26.4"],
     "ort.1.20.1.packages: expected a pin of onnxruntime or onnxruntime-gpu"),
    ("ort", "1.20.1", ["onnxruntime==1.20.1", "onnxruntime==1.20.1"],
     "ort.1.20.1.packages[1]: onnxruntime is pinned twice"),
    ("torch", "2.10.0", None, "torch.2.10.0.packages: missing (expected a pin torch==2.10.0)"),
])
def test_the_pin_of_the_axis_package_carries_the_key(mutated, axis, value, packages, problem):
    if packages is None:
        del mutated[axis][value]["packages"]
    else:
        mutated[axis][value]["packages"] = packages
    assert refusal(mutated).startswith(f"matrix.yaml: {problem}")


def test_the_gpu_build_of_onnxruntime_names_the_ort_axis_too(mutated):
    mutated["ort"]["1.32.0"]["packages"] = ["onnxruntime-gpu==1.32.0"]
    assert mx.parse(mutated).props("ort", "1.32.0")["packages"] == ["onnxruntime-gpu==1.32.0"]


def test_a_tool_pinned_twice_is_refused(mutated):
    mutated["tools"]["PyYAML"] = "6.0.3"
    assert refusal(mutated) == "matrix.yaml: tools.PyYAML: PyYAML is pinned twice (also as pyyaml)"


def test_profiles_that_expand_past_the_bound_are_refused_at_once(mutated):
    for minor in range(100, 200):
        mutated["ort"][f"1.{minor}.0"] = {"packages": [f"onnxruntime==1.{minor}.0"]}
        mutated["tensorrt"][f"10.{minor}"] = {"cuda_majors": ["13"]}
    mutated["profiles"]["host"]["ort"] = [f"1.{minor}.0" for minor in range(100, 200)]
    mutated["profiles"]["host"]["tensorrt"] = [f"10.{minor}" for minor in range(100, 200)]
    message, seconds = timed(refusal, mutated)
    assert message.startswith("matrix.yaml: profiles: ")
    assert message.endswith(" axis-value combinations in all: more than the 50000 a matrix may "
                            "expand to")
    assert seconds < 5


# ------------------------------------------------------------ 13: one line, never a traceback


@pytest.mark.parametrize("text", ["a: " + "[" * 5000 + "]" * 5000,
                                  "a: " + "{b: " * 5000 + "c" + "}" * 5000,
                                  "[" * (mx.MAX_BYTES - 10)])
def test_deep_nesting_is_refused_at_the_bound(text):
    message, seconds = timed(refusal, text)
    assert message.endswith(f": nested deeper than {mx.MAX_DEPTH} levels")
    assert seconds < 5


def test_deep_block_nesting_is_refused_at_the_bound():
    text = "".join(f"{' ' * depth}k{depth}:\n" for depth in range(mx.MAX_DEPTH + 5))
    assert refusal(text) == "matrix.yaml: line 32, column 32: nested deeper than 32 levels"


@pytest.mark.parametrize("text, problem", [
    ("? [a, b]\n: 1\n", "line 1, column 3: a key must be text or a number, not a sequence"),
    ("? {a: 1}\n: 1\n", "line 1, column 3: a key must be text or a number, not a mapping"),
    ("on: [push]\n", "line 1, column 1: key 'on': YAML reads it as bool True: quote it"),
    ("~: 1\n", "line 1, column 1: key '~': YAML reads it as NoneType None: quote it"),
    ("a: !!set {b, c}\n", "line 1, column 4: YAML tags (tag:yaml.org,2002:set) are not allowed"),
    ("a: !!binary aGk=\n", "line 1, column 4: YAML tags (tag:yaml.org,2002:binary) are not allowed"),
    ("a: 1:30\n", "line 1, column 4: '1:30': YAML reads it as a base-60 number: quote it"),
    ("a: " + "9" * 5000 + "\n", "line 1, column 4: unusable number: Exceeds the limit"),
    ("a: b\n\xff: c\n", "line 2, column 1: not UTF-8 text (byte 0xff)"),
])
def test_odd_yaml_is_one_line(text, problem):
    data = text.encode("latin-1") if "\xff" in text else text.encode()
    assert refusal(data).startswith(f"matrix.yaml: {problem}")


def test_a_date_is_read_as_text_not_a_crash():
    # PyYAML reads 2001-13-01 as a timestamp and datetime() raises ValueError on month 13
    text = edited("description: everything, including the CUDA-12 leg (torch 2.10.0 cu128, "
                  "Debian's CUDA 12.4)", "description: 2001-13-01")
    assert mx.from_bytes(text.encode()).profiles["full"].description == "2001-13-01"


@pytest.mark.parametrize("path, value, where", [
    (("stages", "bench", "run"), ["bench/run.py", "{out"], "stages.bench.run[1]: '{out': expected '}'"),
    (("stages", "bench", "run"), ["bench/run.py", 5],
     "stages.bench.run[1]: expected text, got int 5"),
    (("stages", "bench", "run"), [], "stages.bench.run: expected run: [script.py, args...]"),
    (("stages", "bench", "kind"), ["script"], "stages.bench.kind: expected one of"),
    (("stages", "bench", "env"), {"A": "{x"}, "stages.bench.env.A: '{x': expected '}'"),
    (("profiles", "full", "runs_on"), 5, "profiles.full.runs_on: expected a list of runner labels"),
    (("suite", "ort"), ["1.32.0"], "suite.ort: expected an ONNX Runtime release of ort:, got list"),
    (("rules", 0), {"id": "r", "why": "w", "require": [], 1: "a", "zz": "b"}, "rules.r.1: expected a text key, got int 1"),
    (("toolkits", "cuda-13.0-pypi", 5), "x", "toolkits.cuda-13.0-pypi.5: expected one of the keys"),
    (("settings", 5), 1, "settings.5: expected a setting name (letters, digits, _), got int 5"),
    (("settings", "a b"), 1, "settings.a b: expected a setting name"),
])
def test_odd_values_are_one_line(mutated, path, value, where):
    target = mutated
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    assert refusal(mutated).startswith(f"matrix.yaml: {where}")


def test_a_message_quoting_input_stays_one_short_line(mutated):
    mutated["ort"]["1.17.3\n" + "x" * 100_000] = mutated["ort"].pop("1.17.3")
    message = refusal(mutated)
    assert message.startswith("matrix.yaml: ort.1.17.3\\nxxx")
    assert len(message) < 5 * errors.MAX_SHOWN


@pytest.mark.parametrize("data", [
    pytest.param(laughs().encode(), id="laughs"),
    pytest.param(("a: " + "[" * 5000).encode(), id="deep"),
    pytest.param(b"? [a, b]\n: 1\n", id="complex-key"),
    pytest.param(REAL.encode() + b"\xff", id="not-utf8"),
    pytest.param(edited('"1.17.3": {packages', '"1.17; touch x": {packages').encode(),
                 id="bad-ort-key"),
])
def test_the_check_command_prints_one_line_and_exits_2(tmp_path, data):
    path = tmp_path / "matrix.yaml"
    path.write_bytes(data)
    done = check(path)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith("matrix.yaml: "), done.stderr


def test_the_matrix_session_refuses_undecodable_bytes_with_exit_2(tmp_path, monkeypatch):
    from ci.engine import runner

    broken = tmp_path / "matrix.yaml"
    broken.write_bytes(REAL.encode() + b"\xff")
    monkeypatch.setattr(mx.load, "__defaults__", (broken,))
    assert runner.main(["--list", "--out", str(tmp_path / "out")]) == 2
    assert not (tmp_path / "out").exists()


def test_stage_keys_stay_linear_in_a_dense_stage_graph(matrix):
    dense = copy.copy(matrix)
    stages = dict(matrix.stages)
    names = []
    for i in range(40):     # each after every earlier one: 2**40 paths
        name = f"s{i}"
        stages[name] = mx.Stage(name, "script", None, "ort", "never", ("torch",), tuple(names), (),
                                "inputs", ("x.py",), {})
        names.append(name)
    object.__setattr__(dense, "stages", stages)
    cell = mx.expand(matrix, "host")[0][0]
    key, seconds = timed(mx.stage_key, dense, "s39", cell)
    assert ("after.s0", "") in key and seconds < 5
