"""An op of a known shape is two files: in a copy of the tree, a probe op of each launcher family
(kernels/tests/probe_ops/: its spec module and its math header, nothing else) is added, the
declarations regenerated (kernels' own files: nothing under packages/ changes), and each layer's
registry tests run on the probes: the kernels' generated files and CPU bindings (test_generated.py,
test_op_bindings.py), opforge_ort's and opforge_trt's tables (read from the copy's spec), and
opforge_torch built from the copy (CPU, one extension build: its build writes the schemas and entry
points from the copy's spec) with its test_registry.py and opcheck of every overload."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import opforge_spec as spec

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PROBES = HERE / "probe_ops"
FAMILIES = ("elementwise", "gated", "row_norm", "residual_row_norm", "row_norm_quant", "residual_row_norm_quant")
JUNK = shutil.ignore_patterns("build", "dist", "__pycache__", "*.egg-info", "*.so", "*.so.*", ".venv",
                              "*.o", ".pytest_cache")


def probe_names() -> list:
    return sorted(p.stem for p in PROBES.glob("*.py"))


def add_probes(kernels: Path) -> None:
    """Each probe's two files where an op's two files go, nothing else."""
    for name in probe_names():
        shutil.copy(PROBES / f"{name}.py", kernels / "opforge_spec" / "ops" / f"{name}.py")
        shutil.copy(PROBES / f"{name}.h", kernels / "include" / "opforge" / "kernels" / "ops" / f"{name}.h")


def run(args, cwd: Path, env: dict, what: str, timeout: int) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    out = done.stdout + done.stderr
    assert done.returncode == 0, f"{what} failed in the copy with the probe ops:\n{out[-6000:]}"
    return out


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("two_file_ops")
    for folder in ("kernels", "packages"):
        shutil.copytree(ROOT / folder, root / folder, ignore=JUNK)
    add_probes(root / "kernels")
    packages = snapshot(root / "packages")
    env = {**os.environ, "PYTHONPATH": str(root / "kernels")}
    run([sys.executable, "-m", "opforge_spec.generate"], root / "kernels", env, "generate", 120)
    assert snapshot(root / "packages") == packages, "generate wrote under packages/"
    return root


def snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def python_path(*folders: Path) -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(str(f) for f in folders)}


def test_each_probe_is_two_files_of_a_known_family():
    names = probe_names()
    assert sorted(p.name for p in PROBES.iterdir() if p.suffix in (".py", ".h")) == sorted(
        [f"{n}.py" for n in names] + [f"{n}.h" for n in names])
    assert len(names) == len(FAMILIES)


def test_the_copy_finds_every_probe_in_its_family(tree):
    env = python_path(tree / "kernels")
    program = ("import opforge_spec as s; "
               "print(sorted((o.family, o.name) for o in s.OPS.values() if o.name.startswith('Probe')))")
    listing = run([sys.executable, "-c", program], tree, env, "listing the ops", 60)
    assert listing.strip() == str(sorted(zip(FAMILIES, ("ProbeSoftsign", "ProbeSigmoidGLU", "ProbeRMSNorm",
                                                        "ProbeAddRMSNorm", "ProbeRMSNormQuant",
                                                        "ProbeAddRMSNormQuant"))))
    assert not any(op.name.startswith("Probe") for op in spec.OPS.values())  # only in the copy


def test_kernels_generated_files_and_cpu_bindings_take_the_probes(tree):
    env = python_path(tree / "kernels")
    out = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_generated.py",
               "tests/test_op_bindings.py"], tree / "kernels", env, "kernels' registry tests", 400)
    assert "passed" in out


def test_opforge_ort_and_opforge_trt_name_the_probes(tree):
    """Their op tables come from the spec they see (no file of theirs lists ops)."""
    packages = tree / "packages"
    env = python_path(packages / "ort_plugin" / "src", packages / "trt_plugin" / "src", tree / "kernels")
    program = ("import opforge_ort, opforge_trt; "
               "print([o for o in opforge_ort.OPS if o.startswith('Probe')]); "
               "print(sorted(o for o in opforge_trt.OPS if o.startswith('Probe')))")
    got = run([sys.executable, "-c", program], tree, env, "importing opforge_ort and opforge_trt", 60).split("\n")
    names = probe_spec_names(tree)
    assert len(names) == len(FAMILIES)
    assert got[:2] == [str(names), str(sorted(names))]


def probe_spec_names(tree: Path) -> list:
    program = "import opforge_spec as s; print(' '.join(o for o in s.OPS if o.startswith('Probe')))"
    return run([sys.executable, "-c", program], tree, python_path(tree / "kernels"), "listing", 60).split()


def test_opforge_torch_built_from_the_copy_registers_the_probes(tree):
    pytest.importorskip("torch")
    torch_ext, kernels = tree / "packages" / "torch_ext", tree / "kernels"
    env = {**python_path(kernels), "OPFORGE_CUDA_HOME": "", "MAX_JOBS": "2",
           "OPFORGE_KERNELS_INCLUDE_DIR": str(kernels / "include")}
    run([sys.executable, "setup.py", "build_ext", "--inplace"], torch_ext, env, "opforge_torch's build", 500)
    # its declarations, written by the build: the schemas in the build tree, the entry points in the package
    assert not (torch_ext / "csrc" / "schema_generated.h").exists()
    (header,) = (torch_ext / "build").rglob("schema_generated.h")
    assert all(f'"{op}(' in header.read_text() for op in ("probe_softsign", "probe_add_rms_norm",
                                                           "probe_rms_norm_quant", "probe_add_rms_norm_quant"))
    wrappers = (torch_ext / "src" / "opforge_torch" / "_ops_generated.py").read_text()
    assert all(f"def {op}(" in wrappers for op in ("probe_softsign", "probe_sigmoid_glu", "probe_rms_norm",
                                                   "probe_rms_norm_quant", "probe_add_rms_norm_quant"))
    env = python_path(torch_ext / "src", kernels)
    out = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_registry.py", "-k",
               "Probe and not onnxruntime_with_the_plugin"], torch_ext, env, "opforge_torch's test_registry", 400)
    assert "passed" in out  # pytest exits 5 when -k selects nothing
    # opcheck of every overload, the probes' from their spec (their schemas, fake and autograd kernels)
    run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_ops.py", "-k", "opcheck and cpu"],
        torch_ext, env, "opforge_torch's opcheck", 300)
