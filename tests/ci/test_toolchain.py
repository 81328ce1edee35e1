"""A profile's toolchain: portable (zig for glibc 2.28, what ships) or native (the host's compiler,
the suite). Only the build env and the digest of a native build change."""
from __future__ import annotations

from pathlib import Path

import pytest

from ci import model as mx
from ci.engine import cache, executors


def loader_build(matrix: mx.Matrix, profile: str, tmp_path: Path) -> executors.Job:
    cell = mx.expand(matrix, profile)[0][0]
    stage = matrix.stages["build-loader"]
    return executors.Job(matrix, cell, stage, "key", "digest", {}, tmp_path / "log", tmp_path)


class Workspace(executors.Workspace):
    """The real workspace, minus provisioning: the ORT headers and zig are named, not fetched."""
    def ort_include(self, matrix):
        return "/ort-include"

    def zig(self, matrix, tools, log):
        return "/zig"


@pytest.fixture
def with_native_tests(mutated):
    mutated["stages"]["build-loader"]["tools"] = ["ziglang"]
    mutated["tools"]["ziglang"] = "0.17.1"
    mutated["profiles"]["ci-gpu"]["toolchain"] = "native"
    return mx.parse(mutated)


def test_portable_builds_use_zig_and_native_ones_the_host_compiler(with_native_tests, tmp_path):
    ws = Workspace(tmp_path)
    portable = executors.build_env(loader_build(with_native_tests, "host", tmp_path), ws)
    native = executors.build_env(loader_build(with_native_tests, "ci-gpu", tmp_path), ws)
    assert portable["OPFORGE_ZIG"] == "/zig"
    assert "OPFORGE_ZIG" not in native


def test_a_native_build_is_its_own_cache_entry(with_native_tests, tmp_path):
    digests = {cache.digest(with_native_tests, job.cell, job.stage, job.key, {})
               for job in (loader_build(with_native_tests, p, tmp_path) for p in ("host", "ci-gpu"))}
    assert len(digests) == 2


def test_toolchain_is_portable_or_native(mutated):
    mutated["profiles"]["host"]["toolchain"] = "fast"
    with pytest.raises(mx.MatrixError) as caught:
        mx.parse(mutated)
    assert "profiles.host.toolchain: expected one of native, portable, got 'fast'" in str(caught.value)

