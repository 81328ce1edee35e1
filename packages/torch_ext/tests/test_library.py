"""The shared library: SONAME, stable-ABI-only imports, loading outside the package, build info."""

import os
import re
import shutil
import subprocess
import sys

import pytest
import torch
from abi_check import LOAD_AND_RUN  # shared with the matrix's cross-torch stage

import opforge_torch

LIB = opforge_torch.library_path()


def _tool(name):
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} not found (binutils)")
    return path


def test_soname():
    out = subprocess.run([_tool("readelf"), "-d", LIB], capture_output=True, text=True, check=True)
    assert re.search(r"\(SONAME\)\s+Library soname: \[libopforge_torch\.so\.1\]", out.stdout)
    assert os.path.basename(LIB) == "libopforge_torch.so.1"


def test_exports_nothing_and_imports_only_the_stable_c_abi():
    nm = _tool("nm")
    defined = subprocess.run([nm, "-D", "--defined-only", LIB], capture_output=True, text=True,
                             check=True).stdout.split("\n")
    assert [line for line in defined if line.strip()] == []
    undefined = subprocess.run([nm, "-D", "-C", "--undefined-only", LIB], capture_output=True,
                               text=True, check=True).stdout
    # Any c10::/at::/torch:: C++ symbol would tie the binary to one torch release.
    assert not re.findall(r"\b(?:c10|at|torch)::\S+", undefined)
    assert "torch_library_impl" in undefined


def test_loads_with_torch_ops_load_library_in_a_fresh_process():
    out = subprocess.run([sys.executable, "-c", LOAD_AND_RUN, LIB], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == torch.__version__


def test_loads_in_another_torch_release():
    """Stable ABI proof: the binary built with one torch runs in another (OPFORGE_OTHER_TORCH_PYTHON)."""
    other = os.environ.get("OPFORGE_OTHER_TORCH_PYTHON")
    if not other:
        pytest.skip("no second torch: set OPFORGE_OTHER_TORCH_PYTHON to a python with another torch")
    probe = subprocess.run([other, "-c", "import torch; print(torch.__version__, torch.version.cuda)"],
                           capture_output=True, text=True, timeout=300, check=True).stdout.split()
    cuda = opforge_torch.build_info()["cuda"]
    if cuda and (probe[1] == "None" or probe[1].split(".")[0] != cuda.split(".")[0]):
        pytest.skip(f"this build has CUDA {cuda} kernels; torch {probe[0]} there has CUDA {probe[1]}")
    out = subprocess.run([other, "-c", LOAD_AND_RUN, LIB], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    built = opforge_torch.build_info()["torch_built_against"]
    other_version = out.stdout.strip().splitlines()[-1]
    assert other_version.split("+")[0] != built.split("+")[0], (
        f"OPFORGE_OTHER_TORCH_PYTHON has torch {other_version}, the same release as the build")


def test_build_info():
    info = opforge_torch.build_info()
    assert info["abi"] == "stable"
    assert info["cxx11_abi"] == torch._C._GLIBCXX_USE_CXX11_ABI
    cuda = info["cuda"]
    assert info["variant"] == f"stable{info['torch_min']}-" + (f"cu{cuda.replace('.', '')}" if cuda else "cpu")
    assert bool(info["archs"]) == bool(cuda)


@pytest.mark.parametrize("change,needles", [
    ({"torch_min": "99.0"}, ["needs torch >= 99.0", torch.__version__, "pip install"]),
    ({"cuda": "11.8", "archs": ["8.0"]}, ["CUDA 11.8", torch.__version__, "pip install"]),
])
def test_mismatched_torch_is_refused_with_both_versions(change, needles):
    info = {**opforge_torch.build_info(), **change}
    if change.get("cuda") and torch.version.cuda and torch.version.cuda.startswith("11."):
        pytest.skip("torch is a CUDA 11 build")
    with pytest.raises(ImportError) as err:
        opforge_torch._check_compatible(info)
    wanted = f"cu{torch.version.cuda.replace('.', '')}" if torch.version.cuda else "cpu"
    for needle in needles + [info["torch_built_against"], f"<opforge index>/{wanted}/simple"]:
        assert needle in str(err.value)
    assert "./packages" not in str(err.value), "a user has wheels, not a checkout"
