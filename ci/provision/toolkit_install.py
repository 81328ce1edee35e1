"""Building a toolkit root: pinned wheels installed with `pip --target`, and a Debian toolkit
package relocated into opforge's cache (its nvcc reading our nvcc.profile)."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from ci.model.toolkit_spec import ToolkitError, ToolkitSpec


def progress(spec: ToolkitSpec, message: str) -> None:
    print(f"opforge: toolkit {spec.id}: {message}", file=sys.stderr, flush=True)


def pip_install(spec: ToolkitSpec, pins: tuple[str, ...], target: Path) -> None:
    done = target / ".installed"
    if done.exists() and done.read_text().split() == list(pins):
        return
    progress(spec, f"pip install --no-deps {' '.join(pins)}")
    command = [sys.executable, "-m", "pip", "install", "--no-deps", "--only-binary=:all:", "--no-cache-dir",
               "--disable-pip-version-check", "--no-compile", "--progress-bar", "off",
               "--target", str(target), *pins]
    result = subprocess.run(command, check=False, stdout=sys.stderr, stderr=subprocess.PIPE, text=True)
    if result.returncode != 0:
        raise ToolkitError(f"opforge: toolkit {spec.id}: pip could not install {' '.join(pins)}: "
                           f"{result.stderr.strip()[-600:]}; fix: check the pins in "
                           f"toolkits.{spec.id} of matrix.yaml and that PyPI is reachable")
    done.write_text("\n".join(pins) + "\n")


def link_libcudart(spec: ToolkitSpec, lib: Path) -> None:
    """libcudart.so for `-lcudart` (the wheels ship only libcudart.so.MAJOR)."""
    versioned = sorted(lib.glob("libcudart.so.*"))
    if not versioned:
        raise ToolkitError(f"opforge: toolkit {spec.id}: no libcudart.so.* in {lib}; fix: pin "
                           f"nvidia-cuda-runtime in toolkits.{spec.id} of matrix.yaml")
    if not (lib / "libcudart.so").exists():
        (lib / "libcudart.so").symlink_to(versioned[0].name)


def relocate_debian(spec: ToolkitSpec, tree: Path, work: Path) -> Path:
    """A root whose bin/nvcc reads our nvcc.profile instead of the package's /etc/nvcc.profile."""
    tools = tree / "usr" / "lib" / "nvidia-cuda-toolkit"
    if not (tools / "bin" / "nvcc").is_file():
        raise ToolkitError(f"opforge: toolkit {spec.id}: no usr/lib/nvidia-cuda-toolkit/bin/nvcc in "
                           f"{tree}; fix: toolkits.{spec.id}.debian must name the package that "
                           f"ships nvcc (nvidia-cuda-toolkit)")
    root = work / "root"
    (root / "bin").mkdir(parents=True)
    # nvcc reads nvcc.profile from the folder it runs from: a copy of the binary gets ours.
    shutil.copy2(tools / "bin" / "nvcc", root / "bin" / "nvcc")
    for tool in sorted((tree / "usr" / "bin").iterdir()):
        if tool.name != "nvcc":  # usr/bin/nvcc is a wrapper script with absolute paths
            (root / "bin" / tool.name).symlink_to(tool.resolve())
    for name in ("cicc", "crt"):  # crt/ holds the link stubs nvcc expects beside itself
        (root / "bin" / name).symlink_to(tools / "bin" / name)
    (root / "nvvm").mkdir()
    (root / "nvvm" / "libdevice").symlink_to(tools / "libdevice")
    _merge(spec, root / "include", sorted((work / "pypi" / "nvidia").glob("*/include")))
    _merge(spec, root / "lib64", sorted((work / "pypi" / "nvidia").glob("*/lib")))
    link_libcudart(spec, root / "lib64")
    _stand_in_static_runtime(root / "lib64")
    (root / "bin" / "nvcc.profile").write_text(
        "# Written by opforge ci/provision/toolkit_install.py: the Debian package relocated into a cache.\n"
        "TOP = $(_HERE_)/..\n"
        "NVVMIR_LIBRARY_DIR = $(TOP)/nvvm/libdevice\n"
        # Debian's folder also holds a g++ wrapper that picks a host compiler CUDA 12.4 supports.
        f"PATH += $(TOP)/bin:{tools / 'bin'}:\n"
        'INCLUDES += "-I$(TOP)/include" $(_SPACE_)\n'
        'LIBRARIES =+ $(_SPACE_) "-L$(TOP)/lib64"\n')
    return root


def _stand_in_static_runtime(lib64: Path) -> None:
    """Linker scripts for the static libraries nvcc links by default and no small package ships.

    nvcc adds -lcudart_static -lcudadevrt to every link (CMake's compiler check links that way);
    Debian has them only in the 900 MB nvidia-cuda-dev. GNU ld reads a file it cannot parse as an
    archive as a linker script: cudart_static becomes the shared runtime (opforge links libcudart
    dynamically anyway) and cudadevrt is empty, so relocatable device code (-rdc, dynamic
    parallelism) fails to link with this toolkit, loudly, while ordinary kernels link.
    """
    cudart = min(lib64.glob("libcudart.so.*")).name
    (lib64 / "libcudart_static.a").write_text(
        f"/* opforge: no static CUDA runtime in this toolkit; use the shared one */\nINPUT({cudart})\n")
    (lib64 / "libcudadevrt.a").write_text(
        "/* opforge: no device runtime in this toolkit (no -rdc, no dynamic parallelism) */\n")


def _merge(spec: ToolkitSpec, into: Path, sources: list[Path]) -> None:
    """Symlink every entry of the source folders into one folder; a name clash is an error."""
    into.mkdir(parents=True, exist_ok=True)
    for source in sources:
        for entry in sorted(source.iterdir()):
            if entry.name in ("__init__.py", "__pycache__"):  # the wheels' package markers
                continue
            link = into / entry.name
            if link.is_symlink() or link.exists():
                if entry.is_dir() and link.is_dir():
                    _merge_dir(link, entry)
                    continue
                raise ToolkitError(f"opforge: toolkit {spec.id}: {entry.name} comes from two "
                                   f"wheels ({link.resolve()} and {entry}); fix: pin one release")
            link.symlink_to(entry)


def _merge_dir(link: Path, entry: Path) -> None:
    """Two wheels share a folder (include/crt): turn the symlink into a folder of symlinks."""
    if link.is_symlink():
        first = link.resolve()
        link.unlink()
        link.mkdir()
        for item in first.iterdir():
            (link / item.name).symlink_to(item)
    for item in entry.iterdir():
        if not (link / item.name).exists():
            (link / item.name).symlink_to(item)
