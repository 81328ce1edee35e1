"""Fixtures for the matrix tooling tests: the FROZEN matrix (golden/matrix.yaml) and mutated
copies of it. Only test_live_matrix.py reads the live matrix.yaml: a version bump there changes no
other test."""
from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FROZEN = Path(__file__).resolve().parent / "golden" / "matrix.yaml"
sys.path.insert(0, str(REPO))

from ci import model as mx
from ci.provision import probe

HOST = probe.Host(python="3.11.7", glibc="glibc 2.36",
                  gpu=probe.Fact(False, "no GPU: no nvidia-smi"),
                  tensorrt=probe.Fact(False, "no TensorRT runtime"),
                  podman=probe.Fact(False, "podman not installed"),
                  toolkits={"cuda-13.0-system": probe.Fact(True, "cached"),
                            "cuda-13.0-pypi": probe.Fact(True, "cached"),
                            "cuda-12.4-trixie": probe.Fact(False, "unavailable: needs apt-get")},
                  system_nvcc=probe.Fact(True, "CUDA 13.0"))


@pytest.fixture(scope="session")
def raw() -> dict:
    return mx.read_yaml(FROZEN.read_text())


@pytest.fixture(scope="session")
def matrix() -> mx.Matrix:
    return mx.load(FROZEN)


@pytest.fixture
def mutated(raw):
    """A deep copy of matrix.yaml's data to break on purpose."""
    return copy.deepcopy(raw)


@pytest.fixture
def host() -> probe.Host:
    """A host like this machine: no GPU, no TensorRT, the CUDA 13 toolkits, no Debian toolkit."""
    return HOST
