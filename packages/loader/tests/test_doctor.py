"""`opforge-loader doctor`: each finding of seed 000 §5.5 / seed 004 §5.4 on a library built to have it."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from plugin_build import ELF32_I386, build_c_plugin, foreign_machine

import opforge_loader
from opforge_loader import doctor

NN = os.path.join(opforge_loader.plugin_dir(), "libops_opforge_nn.so.1")


def by_check(findings):
    return {f.check: f for f in findings}


def compile_lib(out: Path, name: str, source: str, *flags, lang="c", soname=None) -> Path:
    src = out / (name + (".c" if lang == "c" else ".cpp"))
    src.write_text(source)
    lib = out / name
    compiler = "gcc" if lang == "c" else "g++"
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(lib), str(src), f"-Wl,-soname,{soname or name}", *flags], check=True)
    return lib


def test_shipped_plugin_is_clean():
    f = by_check(doctor.diagnose(NN, isolated=True))
    assert [x for x in f.values() if x.status in ("warn", "error")] == []
    assert f["entry"].status == f["exports"].status == f["soname"].status == f["manifest"].status == "ok"
    assert f["isolated"].status == "ok" and "entry, init and unload ran" in f["isolated"].message


def test_the_dynamic_loader_counts_as_a_needed_library(tmp_path):
    """A library with general-dynamic TLS (zig's libc++, for one) needs __tls_get_addr from ld.so,
    which ldd lists as a bare path: the symbol is provided, not undefined."""
    src = "__thread int counter;\nint bump(void) { return ++counter; }\n"
    lib = compile_lib(tmp_path, "libtls.so.1", src, "-ftls-model=global-dynamic", "-Wl,--no-as-needed",
                      "-Wl,-z,defs")
    assert "__tls_get_addr" in subprocess.run(["nm", "-D", "--undefined-only", str(lib)],
                                              capture_output=True, text=True).stdout
    f = by_check(doctor.diagnose(str(lib)))
    assert f["undefined"].status == "ok", f["undefined"].message


def test_leaked_helper_is_reported(plugin_dir):
    lib = build_c_plugin(plugin_dir, "libops_test_leaky.so.1", hidden=False)
    f = by_check(doctor.diagnose(str(lib)))["exports"]
    assert f.status == "error" and "helper_impl" in f.message
    assert "-fvisibility=hidden" in f.fix and "version script" in f.fix


def test_missing_entry_is_reported(plugin_dir):
    lib = build_c_plugin(plugin_dir, "libops_test_noentry.so.1", defines=("ENTRY_NAME=opforge_plugin_entry_v0",))
    f = by_check(doctor.diagnose(str(lib)))["entry"]
    assert f.status == "error" and "opforge_plugin_entry not exported" in f.message and "extern" in f.fix


def test_soname_mismatch(plugin_dir):
    lib = build_c_plugin(plugin_dir, "libops_test_offset.so.1", manifest=False)
    renamed = lib.rename(plugin_dir / "libops_test_renamed.so.1")
    f = by_check(doctor.diagnose(str(renamed)))
    assert f["soname"].status == "warn" and "libops_test_offset.so.1 differs" in f["soname"].message
    assert f["manifest"].status == "error" and "no manifest" in f["manifest"].message


def test_missing_dependency_and_undefined_symbols(tmp_path):
    dep = compile_lib(tmp_path, "libdep.so", "int dep_fn(void) { return 1; }")
    lib = compile_lib(tmp_path, "libuses.so.1", "int dep_fn(void); int host_private(void);\n"
                      "__attribute__((visibility(\"default\"))) const void* opforge_plugin_entry(void) { return 0; }\n"
                      "int f(void) { return dep_fn() + host_private(); }", f"-L{tmp_path}", "-ldep", "-fvisibility=hidden")
    f = by_check(doctor.diagnose(str(lib), kind="opforge"))
    assert f["undefined"].status == "error" or f["dependencies"].status == "error"
    dep.unlink()
    f = by_check(doctor.diagnose(str(lib), kind="opforge"))
    assert f["dependencies"].status == "error" and "libdep.so" in f["dependencies"].message
    assert "RUNPATH" in f["dependencies"].fix


def test_undefined_symbol_named_with_hint(tmp_path):
    lib = compile_lib(tmp_path, "libort_bad.so.1", "const void* OrtGetApiBase(void);\n"
                      "__attribute__((visibility(\"default\"))) void* RegisterCustomOps(void* o, const void* b) {"
                      " (void)o; (void)b; return (void*)OrtGetApiBase(); }", "-fvisibility=hidden")
    f = by_check(doctor.diagnose(str(lib)))
    assert f["entry"].status == "ok" and "kind onnxruntime" in f["entry"].message
    assert f["undefined"].status == "error" and "OrtGetApiBase" in f["undefined"].message
    assert "ORT_API_MANUAL_INIT" in f["undefined"].fix


def test_cxx11_abi(tmp_path):
    src = '#include <string>\n__attribute__((visibility("default"))) std::string name_of(int i) { return std::to_string(i); }\n'
    lib = compile_lib(tmp_path, "libabi.so.1", src, "-D_GLIBCXX_USE_CXX11_ABI=1", lang="cpp")
    assert by_check(doctor.diagnose(str(lib), kind="opforge"))["cxx11-abi"].status == "info"
    f = by_check(doctor.diagnose(str(lib), kind="opforge", cxx11_abi=0))["cxx11-abi"]
    assert f.status == "error" and "_GLIBCXX_USE_CXX11_ABI=0" in f.fix


def test_cuda_archs(tmp_path):
    homes = [os.environ.get(v) for v in ("OPFORGE_CUDA_HOME", "CUDA_HOME")] + ["/usr/local/cuda"]  # the toolkit's default
    candidates = [os.path.join(h, "bin", "nvcc") for h in homes if h] + [shutil.which("nvcc") or ""]
    nvcc = next((c for c in candidates if c and os.path.exists(c)), None)
    if nvcc is None:
        pytest.skip("no nvcc: cannot build a library with device code")
    (tmp_path / "k.cu").write_text('__global__ void k(float* x) { x[threadIdx.x] *= 2.f; }\n'
                                   'extern "C" void launch(float* x) { k<<<1, 32>>>(x); }\n')
    lib = tmp_path / "libk.so.1"
    subprocess.run([nvcc, "-shared", "-Xcompiler", "-fPIC", "-gencode", "arch=compute_80,code=sm_80",
                    "-gencode", "arch=compute_90,code=[sm_90,compute_90]", str(tmp_path / "k.cu"), "-o", str(lib)], check=True)
    assert doctor.cuda_archs(str(lib)) == ({80, 90}, {90})
    assert by_check(doctor.diagnose(str(lib), require_archs={80, 90}))["cuda-archs"].status == "ok"
    f = by_check(doctor.diagnose(str(lib), require_archs={86}))["cuda-archs"]
    assert f.status == "error" and "missing sm_86" in f.message and "8.6" in f.fix
    assert by_check(doctor.diagnose(str(lib), require_archs={100}))["cuda-archs"].status == "warn"  # PTX 90 JITs
    f = by_check(doctor.diagnose(NN, require_archs={80}))["cuda-archs"]
    assert f.status == "error" and "no CUDA device code" in f.message


def test_isolated_probe_reports_crash_signal(plugin_dir):
    lib = build_c_plugin(plugin_dir, "libops_test_crash.so.1", defines=("CRASH_IN_INIT",))
    f = by_check(doctor.diagnose(str(lib), isolated=True))["isolated"]
    assert f.status == "error" and "SIGSEGV" in f.message and "entry api_version=1" in f.message


def test_world_writable_reported(plugin_dir):
    lib = build_c_plugin(plugin_dir, "libops_test_ww.so.1")
    os.chmod(lib, 0o777)
    f = by_check(doctor.diagnose(str(lib)))["permissions"]
    assert f.status == "error" and "chmod o-w" in f.fix


def test_cli_doctor_directory_json_and_exit_code(plugin_dir):
    build_c_plugin(plugin_dir, "libops_test_good.so.1")
    proc = subprocess.run([sys.executable, "-m", "opforge_loader.cli", "doctor", str(plugin_dir), "--json"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert list(json.loads(proc.stdout)) == [str(plugin_dir / "libops_test_good.so.1")]
    build_c_plugin(plugin_dir, "libops_test_leaky.so.1", name="leaky", hidden=False)
    proc = subprocess.run([sys.executable, "-m", "opforge_loader.cli", "doctor", str(plugin_dir)], capture_output=True, text=True)
    assert proc.returncode == 1
    assert "[FAIL] exports" in proc.stdout and "cause:" in proc.stdout and "fix:" in proc.stdout


def test_library_for_another_machine_is_named(plugin_dir):
    machine, found, expected = foreign_machine()
    lib = build_c_plugin(plugin_dir, "libops_test_foreign.so.1", header_patch={18: machine.to_bytes(2, "little")})
    f = by_check(doctor.diagnose(str(lib), isolated=True))
    assert f["machine"].status == "error", f["machine"]
    assert f["machine"].message == f"built for another machine: expected {expected}, found {found}"
    assert "isolated" not in f and "dependencies" not in f  # nothing else to say about a foreign object


def test_32_bit_library_is_named(plugin_dir):
    lib = build_c_plugin(plugin_dir, "libops_test_elf32.so.1", header_patch=ELF32_I386)
    f = by_check(doctor.diagnose(str(lib)))["machine"]
    assert f.status == "error" and f.message.startswith("wrong ELF class: expected 64-bit") and "found 32-bit x86 (i386)" in f.message
