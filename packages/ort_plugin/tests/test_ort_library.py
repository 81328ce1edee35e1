"""The shipped file: SONAME, exported symbols, dependencies, manifest, and the refusal of runtimes
older than the minimum ORT API."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from ort_models import (
    MIN_ORT,
    ORT_VERSION,
    make_model,
    opforge_node,
    output_infos,
    output_shapes,
    result,
    session,
    value_info,
)

import opforge_ort
import opforge_spec as spec

LIB = opforge_ort.library_path()


def _tool(name):
    if shutil.which(name) is None:
        pytest.skip(f"{name} not installed (binutils)")
    return name


@pytest.mark.old_runtime
def test_library_path_is_absolute_and_named_by_soname():
    assert os.path.isabs(LIB) and Path(LIB).is_file()
    assert Path(LIB).name == "libopforge_ort.so.1"


@pytest.mark.old_runtime
def test_soname_and_dependencies():
    dynamic = subprocess.run([_tool("readelf"), "-d", LIB], capture_output=True, text=True, check=True).stdout
    assert "Library soname: [libopforge_ort.so.1]" in dynamic
    needed = [line.split("[")[1].rstrip("]") for line in dynamic.splitlines() if "(NEEDED)" in line]
    assert not [n for n in needed if "onnxruntime" in n], needed  # the API comes from the host
    cudart = [n for n in needed if n.startswith("libcudart")]
    runpath = re.findall(r"\((?:RUNPATH|RPATH)\)\s+Library r(?:un)?path: \[([^\]]+)\]", dynamic)
    if not opforge_ort.build_info()["cuda"]:
        assert not cudart and not runpath, (needed, runpath)
        return
    # a CUDA build: cudart shared (a static one binds the build host's glibc versions), found in
    # the CUDA runtime wheel it depends on, next to it in site-packages; no build path
    major = cudart[0].rsplit(".", 1)[-1] if cudart else "?"
    wheel_dir = f"nvidia/cu{major}/lib" if int(major) >= 13 else "nvidia/cuda_runtime/lib"
    assert runpath == [f"$ORIGIN/../{wheel_dir}"], (needed, runpath)


@pytest.mark.old_runtime
def test_only_the_entry_point_is_exported():
    out = subprocess.run([_tool("nm"), "-D", "--defined-only", LIB], capture_output=True, text=True, check=True).stdout
    assert [line.split()[-1] for line in out.splitlines()] == ["RegisterCustomOps"]


@pytest.mark.old_runtime
def test_no_onnxruntime_symbol_needed():
    out = subprocess.run([_tool("nm"), "-D", "--undefined-only", LIB], capture_output=True, text=True, check=True).stdout
    assert "OrtGetApiBase" not in out  # ORT_API_MANUAL_INIT: nothing binds the library to one ORT


@pytest.mark.old_runtime
def test_manifest_matches_the_installed_file():
    manifest = json.loads(Path(opforge_ort.manifest_path()).read_text())
    assert Path(opforge_ort.manifest_path()) == Path(LIB + ".manifest.json")
    assert manifest["sha256"] == hashlib.sha256(Path(LIB).read_bytes()).hexdigest()
    assert manifest["library"] == "libopforge_ort.so.1" and manifest["name"] == "opforge_ort"
    assert manifest["kind"] == "onnxruntime" and manifest["manifest_version"] == 1
    assert manifest["api_version"] == opforge_ort.build_info()["ort_min_api"] == 17
    assert manifest["sdk"] == {"min": "1.17", "max": None}
    assert manifest["version"] == opforge_ort.__version__
    assert manifest["ops"] == [{"domain": spec.DOMAIN, "name": name, "version": spec.DOMAIN_VERSION}
                               for name in spec.OPS]


NOT_AN_OP = "NotAnOpforgeOp"


def _one_node_run(name: str) -> bool:
    """Whether a session on one `opforge::<name>` node (the spec's first float32 case; a unary
    float32 node for a name outside the spec) is created and runs; refusals must name the op."""
    op = spec.OPS.get(name)
    arrays = [np.asarray(a, np.float32) for a in op.cases("float32")[0].inputs] if op else [np.ones((2, 4), np.float32)]
    input_names = list(op.inputs) if op else ["X"]
    outputs = list(op.outputs) if op else ["Y"]
    model = make_model([opforge_node(name, input_names, outputs, name="node")],
                       [value_info(n, "float32", a.ndim) for n, a in zip(input_names, arrays)],
                       output_infos(name, "float32") if op else [value_info("Y", "float32", None)])
    try:
        got = session(model).run(None, dict(zip(input_names, arrays)))
    except Exception as refused:  # noqa: BLE001  onnxruntime raises its own exception types
        assert name in str(refused), str(refused)
        return False
    if op:
        assert [g.shape for g in got] == output_shapes(name, arrays[0].shape)
        op.check_close(result(name, got), op.reference(*arrays), "float32", label="one-node session")
    return True


@pytest.mark.parametrize("name", [*spec.OPS, NOT_AN_OP])
def test_the_manifest_lists_exactly_what_register_custom_ops_registers(name):
    """The loader reads the manifest before dlopen: an op is listed (domain opforge, its domain
    version) if and only if a session with the library takes it."""
    listed = {(o["domain"], o["name"], o["version"]) for o in opforge_ort.manifest()["ops"]}
    registered = _one_node_run(name)
    assert ((spec.DOMAIN, name, spec.DOMAIN_VERSION) in listed) == registered, (name, registered, listed)
    assert registered == (name in spec.OPS)


# ---- runtimes older than the minimum API -----------------------------------------------------

# A host that offers ORT API versions 1..16 only, as ONNX Runtime 1.16 does: OrtApiBase::GetApi
# returns NULL above 16. Only the first OrtApi member (CreateStatus) is provided: it is all a
# well-behaved library may touch on such a runtime; anything else would crash this program.
OLD_HOST = r"""
#include <dlfcn.h>
#include <stdio.h>
typedef struct OrtStatus OrtStatus;
typedef struct { OrtStatus* (*CreateStatus)(int, const char*); void* later[512]; } Api;
typedef struct { const Api* (*GetApi)(unsigned); const char* (*GetVersionString)(void); } ApiBase;
static char status_text[512];
static unsigned asked[16], n_asked;
static OrtStatus* create_status(int code, const char* msg) {
  snprintf(status_text, sizeof status_text, "code %d: %s", code, msg);
  return (OrtStatus*)status_text;
}
static Api api_16 = {create_status, {0}};
static const Api* get_api(unsigned v) { if (n_asked < 16) asked[n_asked++] = v; return v <= 16 ? &api_16 : NULL; }
static const char* version(void) { return "1.16.3"; }
int main(int argc, char** argv) {
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) { printf("dlopen failed: %s\n", dlerror()); return 2; }
  OrtStatus* (*reg)(void*, const ApiBase*) = (OrtStatus* (*)(void*, const ApiBase*))dlsym(lib, "RegisterCustomOps");
  if (!reg) { printf("no RegisterCustomOps\n"); return 3; }
  ApiBase base = {get_api, version};
  OrtStatus* status = reg(NULL, &base);  /* NULL options: must not be touched on this path */
  printf("asked:");
  for (unsigned i = 0; i < n_asked; ++i) printf(" %u", asked[i]);
  printf("\nstatus: %s\n", status ? status_text : "none");
  return 0;
}
"""


@pytest.mark.old_runtime
def test_older_api_gets_an_error_status_not_a_crash(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the old-API host")
    (tmp_path / "host.c").write_text(OLD_HOST)
    subprocess.run([cc, "-o", str(tmp_path / "host"), str(tmp_path / "host.c"), "-ldl"], check=True)
    run = subprocess.run([str(tmp_path / "host"), LIB], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, (run.returncode, run.stdout, run.stderr)  # a segfault is -11
    assert "asked: 17 1\n" in run.stdout, run.stdout  # the minimum API first, then API 1 to report
    assert "ONNX Runtime 1.16.3 is too old" in run.stdout and "needs ORT API version 17" in run.stdout


@pytest.mark.old_runtime
@pytest.mark.skipif(ORT_VERSION >= MIN_ORT, reason=f"needs onnxruntime < 1.17; installed {ort.__version__}")
def test_real_old_onnxruntime_refuses_with_a_message():
    options = ort.SessionOptions()
    with pytest.raises(Exception, match=r"is too old: libopforge_ort\.so\.1 needs ORT API version 17"):
        options.register_custom_ops_library(LIB)


def test_registering_in_many_session_options_shares_one_domain():
    import numpy as np
    from ort_models import session, single_op_model

    model = single_op_model("Swish", "float32", 1)
    sessions = [session(model) for _ in range(5)]
    del sessions[:3]  # sessions dying must not break the domain the others use
    for s in sessions:
        assert s.run(None, {"X": np.zeros(3, np.float32)})[0].tolist() == [0.0, 0.0, 0.0]
