"""The SDK as shipped: pure-C headers, the CMake package, the path helpers and the CLI's errors."""
import subprocess
import sys
from pathlib import Path

import numpy as np

import opforge_loader


def test_headers_are_pure_c(tmp_path):
    src = tmp_path / "use.c"
    src.write_text('#include <opforge/plugin.h>\n#include <opforge/loader.h>\n'
                   'int main(void) { OpforgeRegistry* r = opforge_registry_create(); opforge_registry_destroy(r);\n'
                   '  return OPFORGE_PLUGIN_API_VERSION == opforge_loader_api_version() ? 0 : 1; }\n')
    lib = Path(opforge_loader.library_path())
    exe = tmp_path / "use"
    subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", f"-I{opforge_loader.include_dir()}",
                    str(src), str(lib), f"-Wl,-rpath,{lib.parent}", "-o", str(exe)], check=True)
    subprocess.run([str(exe)], check=True)


def test_host_library_exports_only_its_c_api():
    lib = opforge_loader.library_path()
    dynamic = subprocess.run(["readelf", "-d", lib], capture_output=True, text=True).stdout
    assert "Library soname: [libopforge_loader.so.1]" in dynamic
    symbols = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True).stdout.split("\n")
    names = [line.split()[-1].split("@")[0] for line in symbols if line.strip()]
    assert names and all(n.startswith("opforge_") or n == "OPFORGE_LOADER_1" for n in names), names


def test_paths_and_cmake_package():
    assert Path(opforge_loader.include_dir(), "opforge", "plugin.h").is_file()
    assert Path(opforge_loader.cmake_dir(), "opforge_pluginConfig.cmake").is_file()
    out = subprocess.run([sys.executable, "-m", "opforge_loader.cli", "cmake-dir"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == opforge_loader.cmake_dir()


def test_cli_run_bad_input_is_an_error_not_a_crash(tmp_path):
    np.save(tmp_path / "x.npy", np.ones((2, 64), np.float32))
    np.save(tmp_path / "w.npy", np.ones(32, np.float32))
    proc = subprocess.run([sys.executable, "-m", "opforge_loader.cli", "run", "RMSNorm", "--plugin-dir", opforge_loader.plugin_dir(),
                           "--input", str(tmp_path / "x.npy"), "--input", str(tmp_path / "w.npy"), "--out", str(tmp_path / "y.npy")],
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert "opforge.RMSNorm: W: expected 1-D tensor of length 64 (last dim of X), got shape [32]" in proc.stderr
    assert not (tmp_path / "y.npy").exists()


def test_new_plugin_refuses_to_overwrite(tmp_path):
    cmd = [sys.executable, "-m", "opforge_loader.cli", "new-plugin", "acme", str(tmp_path)]
    assert subprocess.run(cmd, capture_output=True).returncode == 0
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 2 and "exists" in proc.stderr
