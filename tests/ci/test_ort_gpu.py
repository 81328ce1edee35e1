"""onnxruntime-gpu for GPU profiles: `ort.<release>.gpu_packages` and a profile's `gpu: true`.

The ORT venvs of a gpu profile install the release's GPU build; every other profile's venvs and
cache digests stay as they were (a kept pass of the host profile stays valid)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from ci import model as mx
from ci.engine import cache
from ci.model import key_text
from ci.provision import venvs


def refusal(data: dict) -> str:
    with pytest.raises(mx.MatrixError) as caught:
        mx.parse(data)
    return str(caught.value)


def with_gpu_build(data: dict, release: str = "1.24.4") -> dict:
    data["ort"][release]["gpu_packages"] = [f"onnxruntime-gpu=={release}"]
    return data


def gpu_profile(data: dict, release: str = "1.24.4") -> dict:
    with_gpu_build(data, release)
    data["profiles"]["ci-gpu"]["gpu"] = True
    data["profiles"]["ci-gpu"]["ort"] = [release]
    data["profiles"]["ci-gpu"]["opset"] = [17]
    return data


def test_a_gpu_profile_installs_onnxruntime_gpu_in_its_ort_venvs(mutated):
    matrix = mx.parse(gpu_profile(mutated))
    cells, _ = mx.expand(matrix, "ci-gpu")
    assert cells and all(cell.gpu for cell in cells)
    ort_pins = venvs.requirements(matrix, cells[0], "ort")
    assert ort_pins[0] == "onnxruntime-gpu==1.24.4"
    assert not any(pin.startswith("onnxruntime==") for pin in ort_pins)
    # the torch venv keeps the suite's onnxruntime: only the ORT venvs run the CUDA EP
    assert "onnxruntime-gpu==1.24.4" not in venvs.requirements(matrix, cells[0], "torch")


def test_other_profiles_keep_their_venvs_and_digests(matrix, mutated):
    """Declaring a GPU build changes nothing for the host profile: same pins, same digest."""
    changed = mx.parse(gpu_profile(mutated))
    stage = matrix.stages["unit-ort"]
    for before, after in zip(mx.expand(matrix, "host")[0], mx.expand(changed, "host")[0]):
        assert not after.gpu
        assert venvs.requirements(matrix, before, "ort") == venvs.requirements(changed, after, "ort")
        key = key_text(mx.stage_key(matrix, stage, before))
        assert cache.digest(matrix, before, stage, key, {"build-ort": _no_outputs()}) == \
            cache.digest(changed, after, changed.stages["unit-ort"], key,
                         {"build-ort": _no_outputs()})


def _no_outputs():
    from ci.report.result import Result

    return Result("pass")


@pytest.mark.parametrize(("pins", "problem"), [
    (["onnxruntime-gpu==1.24.3"], ("ort.1.24.4.gpu_packages: onnxruntime-gpu==1.24.3 does not "
                                  "match the key '1.24.4': the pin must carry the key's version")),
    (["onnxruntime==1.24.4"], ("ort.1.24.4.gpu_packages: expected a pin onnxruntime-gpu==1.24.4, "
                              "got onnxruntime==1.24.4")),
    (["onnxruntime-gpu>=1.24"], "ort.1.24.4.gpu_packages[0]: expected an exact pin"),
])
def test_the_gpu_pin_carries_the_release_of_its_key(mutated, pins, problem):
    mutated["ort"]["1.24.4"]["gpu_packages"] = pins
    assert refusal(mutated).startswith(f"matrix.yaml: {problem}")


def test_a_gpu_profile_refuses_a_release_without_a_gpu_build(mutated):
    gpu_profile(mutated)
    mutated["profiles"]["ci-gpu"]["ort"] = ["1.24.4", "1.32.0"]
    assert refusal(mutated) == (
        "matrix.yaml: profiles.ci-gpu.ort: 1.32.0: a gpu profile installs onnxruntime-gpu, but "
        "ort.1.32.0 has no gpu_packages (add gpu_packages: [onnxruntime-gpu==1.32.0] where PyPI "
        "has that release, or choose a release that has one)")


def test_gpu_is_true_or_false(mutated):
    mutated["profiles"]["ci-gpu"]["gpu"] = "yes"
    assert refusal(mutated) == "matrix.yaml: profiles.ci-gpu.gpu: expected true or false, got 'yes'"
