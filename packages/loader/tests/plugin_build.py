"""Build test plugins against the INSTALLED SDK (opforge_loader.include_dir()) and write manifests."""
from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import opforge_loader

DATA = Path(__file__).resolve().parent / "data"
SOURCE = DATA / "test_plugin.c"


def build_c_plugin(out_dir: Path, file_name: str, *, name: str = "test_offset", version: str = "1.0.0",
                   op: str = "Offset", offset: float = 1.0, defines: tuple[str, ...] = (), hidden: bool = True,
                   manifest: bool = True, **manifest_overrides) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    lib = out_dir / file_name
    cmd = ["gcc", "-std=c11", "-O1", "-shared", "-fPIC", f"-I{opforge_loader.include_dir()}",
           f'-DPLUGIN_NAME="{name}"', f'-DPLUGIN_VERSION="{version}"', f'-DOP_NAME="{op}"', f"-DOFFSET={offset}f",
           f"-Wl,-soname,{file_name}", "-Wl,--no-undefined", "-o", str(lib), str(SOURCE)]
    cmd += [f"-D{d}" for d in defines]
    if hidden:
        cmd += ["-fvisibility=hidden", f"-Wl,--version-script={Path(opforge_loader.cmake_dir()) / 'opforge_plugin.map'}"]
    subprocess.run(cmd, check=True)
    if manifest:
        manifest_overrides.setdefault("ops", [{"domain": "test", "name": op, "version": 1}])
        write_manifest(lib, name=name, version=version, **manifest_overrides)
    return lib


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
