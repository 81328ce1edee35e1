"""Layer 1: opforge_torch against torch's composed ops and the float64 reference."""
import pytest

from opforge_align.harness import layer1
from opforge_align.harness.checks import spec


def describe(results) -> str:
    return "\n".join(f"{c.subject} vs {c.against} {c.case}: {c.detail}" for c in results.failed)


@pytest.mark.parametrize("dtype", layer1.DTYPES)
@pytest.mark.parametrize("op", list(spec.OPS.values()), ids=list(spec.OPS))
def test_opforge_torch_matches_composed_and_reference(op, dtype):
    results = layer1.run(ops=[op], dtypes=[dtype])
    assert not results.failed, describe(results)
    compared = {(c.subject, c.against) for c in results.checks if not c.skipped}
    assert ("opforge_torch.cpu", "reference") in compared
    assert ("opforge_torch.cpu", "torch_composed.cpu") in compared


def test_cuda_is_skipped_with_a_reason_not_passed():
    if layer1.torch.cuda.is_available():
        pytest.skip("a GPU is present: layer 1 runs on CUDA instead")
    results = layer1.run(ops=[spec.SWISH], dtypes=["float32"])
    cuda = [c for c in results.checks if c.subject == "opforge_torch.cuda"]
    assert cuda and all(c.skipped.startswith("no GPU") and not c.passed for c in cuda)
    assert results.numbers()["align.skipped"] >= 1
