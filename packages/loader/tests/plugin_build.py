"""Build test plugins against the INSTALLED SDK (opforge_loader.include_dir()) and write manifests."""
from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
from pathlib import Path

import opforge_loader

DATA = Path(__file__).resolve().parent / "data"
SOURCE = DATA / "test_plugin.c"


def nlohmann_json_include_dir() -> str | None:
    """Headers of the PyPI package nlohmann-json (found without importing it), or None."""
    spec = importlib.util.find_spec("nlohmann_json")
    if spec is None or not spec.submodule_search_locations:
        return None
    include = Path(next(iter(spec.submodule_search_locations))) / "include"
    return str(include) if (include / "nlohmann" / "json.hpp").is_file() else None


# ELF header bytes (offset: bytes) that make a plugin another machine's, for the refusal tests:
# e_machine (offset 18) of a machine other than this host's, with the names the messages give both.
_FOREIGN_MACHINE = {"x86_64": (183, "AArch64", "x86-64"), "aarch64": (62, "x86-64", "AArch64")}
ELF32_I386 = {4: bytes([1]), 18: (3).to_bytes(2, "little")}  # EI_CLASS 32-bit, e_machine x86 (i386)


def foreign_machine() -> tuple[int, str, str]:
    """(e_machine of another machine, its name, this host's name)."""
    import platform

    import pytest

    if platform.machine() not in _FOREIGN_MACHINE:
        pytest.skip(f"no foreign machine chosen for a {platform.machine()} host")
    return _FOREIGN_MACHINE[platform.machine()]


def build_c_plugin(out_dir: Path, file_name: str, *, name: str = "test_offset", version: str = "1.0.0",
                   op: str = "Offset", offset: float = 1.0, defines: tuple[str, ...] = (), hidden: bool = True,
                   manifest: bool = True, link_args: tuple[str, ...] = (), header_patch: dict | None = None,
                   **manifest_overrides) -> Path:
    """header_patch: {offset: bytes} written over the built library before its manifest."""
    out_dir.mkdir(parents=True, exist_ok=True)
    lib = out_dir / file_name
    cmd = ["gcc", "-std=c11", "-O1", "-shared", "-fPIC", f"-I{opforge_loader.include_dir()}",
           f'-DPLUGIN_NAME="{name}"', f'-DPLUGIN_VERSION="{version}"', f'-DOP_NAME="{op}"', f"-DOFFSET={offset}f",
           f"-Wl,-soname,{file_name}", "-Wl,--no-undefined", "-o", str(lib), str(SOURCE)]
    cmd += [f"-D{d}" for d in defines]
    cmd += list(link_args)
    if hidden:
        cmd += ["-fvisibility=hidden", f"-Wl,--version-script={Path(opforge_loader.cmake_dir()) / 'opforge_plugin.map'}"]
    subprocess.run(cmd, check=True)
    if header_patch:
        data = bytearray(lib.read_bytes())
        for at, value in header_patch.items():
            data[at:at + len(value)] = value
        lib.write_bytes(bytes(data))
    if manifest:
        manifest_overrides.setdefault("ops", [{"domain": "test", "name": op, "version": 1}])
        write_manifest(lib, name=name, version=version, **manifest_overrides)
    return lib


def build_dependency(directory: Path, file_name: str, value: float, *, soname: str | None = None) -> Path:
    """A library exporting dependency_offset() -> value; SONAME soname (default: the file name)."""
    directory.mkdir(parents=True, exist_ok=True)
    source = directory.parent / f"{file_name}.c"
    source.write_text(f"float dependency_offset(void) {{ return {value}f; }}\n")
    lib = directory / file_name
    soname_args = [] if soname == "" else [f"-Wl,-soname,{soname or file_name}"]
    subprocess.run(["gcc", "-shared", "-fPIC", *soname_args, "-o", str(lib), str(source)], check=True)
    return lib


def build_origin_plugin(directory: Path, file_name: str, dependency: Path, *, version: str = "1.0.0",
                        name: str = "x_origin", op: str = "Offset", search: str = "$ORIGIN",
                        dtags: str = "--enable-new-dtags") -> Path:
    """test_plugin.c with y = x + dependency_offset(), needing `dependency` by its SONAME, found
    through `search` (RUNPATH by default, RPATH with dtags="--disable-new-dtags")."""
    return build_c_plugin(directory, file_name, name=name, version=version, op=op, defines=("DEPENDENCY_OFFSET",),
                          link_args=(f"-L{dependency.parent}", f"-l:{dependency.name}", f"-Wl,{dtags}",
                                     f"-Wl,-rpath,{search}"),
                          ops=[{"domain": "test", "name": op, "version": 1}])


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_manifest(lib: Path, *, name: str, version: str = "1.0.0", ops=None, kind: str = "opforge",
                   api_version: int = 1, sdk=None, **overrides) -> Path:
    data = {"manifest_version": 1, "name": name, "library": lib.name, "version": version, "kind": kind,
            "api_version": api_version, "sdk": sdk or {"min": "0.1", "max": None},
            "ops": ops or [{"domain": "test", "name": "Offset", "version": 1}], "sha256": sha256(lib)}
    data.update(overrides)
    path = lib.with_name(lib.name + ".manifest.json")
    path.write_text(json.dumps(data, indent=2))
    return path


# What a stateful third-party plugin does in init/unload, patched into the `new-plugin` template:
# init twice on one mapping is refused, compute outside init..unload fails.
_SDK_STATE = """
static int g_acme_inits, g_acme_serving;
static int32_t acme_init(const OpforgeHostInfo* host, char* err, size_t len) {
  (void)host;
  if (++g_acme_inits > 1) { snprintf(err, len, "init called twice on one mapping"); return OPFORGE_ERR_INTERNAL; }
  g_acme_serving = 1;
  return OPFORGE_OK;
}
static void acme_unload(void) { g_acme_serving = 0; }
"""


def build_sdk_plugin(root: Path, version: str, extra_offset: float, *, name: str = "acme_offset",
                     op: str = "AddOffset", domain: str = "acme") -> Path:
    """A third-party plugin as its author would make it: `opforge-loader new-plugin`, then CMake
    against the INSTALLED SDK (find_package(opforge_plugin)). Returns the built library."""
    import sys

    src, build = root / f"src-{version}", root / f"build-{version}"
    subprocess.run([sys.executable, "-m", "opforge_loader.cli", "new-plugin", name, str(src), "--op", op,
                    "--domain", domain], check=True, capture_output=True)
    cmake = src / "CMakeLists.txt"
    cmake.write_text(cmake.read_text().replace("VERSION 1.0.0", f"VERSION {version}"))
    source = src / "src" / f"{name}.c"
    text = source.read_text()
    text = text.replace("y[i] = x[i] + offset;", f"y[i] = x[i] + offset + {extra_offset}f;")
    text = text.replace("static int32_t compute(", _SDK_STATE + "\nstatic int32_t compute(", 1)
    text = text.replace("  const int64_t n = numel(&in[0]);", """  if (!g_acme_serving) {
    snprintf(err, len, "called while the plugin is not initialized");
    return OPFORGE_ERR_INTERNAL;
  }
  const int64_t n = numel(&in[0]);""", 1)
    text = text.replace("1, kOps, NULL, NULL}", "1, kOps, acme_init, acme_unload}")
    if "acme_init, acme_unload}" not in text or "g_acme_serving) {" not in text:
        raise RuntimeError(f"{source}: the new-plugin template changed; update build_sdk_plugin's patch")
    source.write_text(text)
    for step in (["cmake", "-S", str(src), "-B", str(build), f"-Dopforge_plugin_DIR={opforge_loader.cmake_dir()}",
                  "-DCMAKE_BUILD_TYPE=Release"], ["cmake", "--build", str(build), "-j2"]):
        subprocess.run(step, check=True, capture_output=True)
    return build / f"libops_{name}.so.1"


_CLONE = "{:05d}"  # the number in each clone's plugin name, op name and file name (same length)


def clone_plugins(directory: Path, count: int) -> list[Path]:
    """count distinct plugins gen_plugin_NNNNN (op GenOpNNNNN, libops_gen_NNNNN.so.1) with their
    manifests: one build of test_plugin.c, its names rewritten in place (same length) per clone."""
    first = build_c_plugin(directory.parent / f"{directory.name}-template", "libops_gen_00000.so.1", name="gen_plugin_00000",
                           op="GenOp00000", manifest=False)
    image = first.read_bytes()
    clones = []
    for i in range(count):
        number = _CLONE.format(i).encode()
        data = image
        for stem in (b"gen_plugin_", b"GenOp", b"libops_gen_"):
            data = data.replace(stem + b"00000", stem + number)
        lib = directory / f"libops_gen_{_CLONE.format(i)}.so.1"
        lib.write_bytes(data)
        write_manifest(lib, name=f"gen_plugin_{_CLONE.format(i)}", ops=[{"domain": "test", "name": f"GenOp{_CLONE.format(i)}",
                                                                          "version": 1}])
        clones.append(lib)
    return clones
