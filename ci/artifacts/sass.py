"""A CUDA build's SASS and PTX: every arch of the cell's list has SASS and the highest (or a
"+PTX" entry) has PTX in each CUDA library of the wheel (cuobjdump --list-elf / --list-ptx)."""
from __future__ import annotations

import shutil
import subprocess
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path


def cuobjdump_for(env: Mapping[str, str]) -> str | None:
    """The cuobjdump a provisioned toolkit names (its own or the pinned PyPI one), else PATH's."""
    named = env.get("OPFORGE_CUOBJDUMP", "")
    if named and Path(named).is_file():
        return named
    own = Path(env.get("OPFORGE_CUDA_HOME", "")) / "bin" / "cuobjdump"
    return str(own) if own.is_file() else shutil.which("cuobjdump")


def wanted_code(arch_list: str) -> tuple[list[str], list[str]]:
    """"8.0;9.0" -> (SASS ["sm_80", "sm_90"], PTX ["sm_90"]): PTX for the "+PTX" entries, else for
    the highest arch (its portable form: "9.0a" -> "sm_90"), as every CUDA build embeds."""
    entries = [a for a in arch_list.replace(",", ";").replace(" ", ";").split(";") if a]
    sass = [f"sm_{a.replace('+PTX', '').replace('.', '')}" for a in entries]
    ptx = [f"sm_{a.replace('+PTX', '').replace('.', '')}" for a in entries if a.endswith("+PTX")]
    if entries and not ptx:
        highest = max(entries, key=lambda a: tuple(int(p) for p in a.rstrip("af").split(".")))
        ptx = [f"sm_{highest.rstrip('af').replace('.', '')}"]
    return sass, ptx


def check_sass(wheels: list[str], arch_list: str, env: Mapping[str, str], log: Path) -> dict:
    """Every arch of the list has SASS (cuobjdump --list-elf) and the highest (or "+PTX") has PTX
    (cuobjdump --list-ptx) in the wheel's CUDA libraries."""
    wanted, wanted_ptx = wanted_code(arch_list)
    tool = cuobjdump_for(env)
    if tool is None:
        return {"ok": False, "numbers": {}, "detail": "no cuobjdump to check the SASS"}
    found: dict[str, set[str]] = {}
    found_ptx: dict[str, set[str]] = {}
    with open(log, "a") as handle, tempfile.TemporaryDirectory(prefix="opforge-sass-") as tmp:
        for wheel_file in wheels:
            with zipfile.ZipFile(wheel_file) as archive:
                for name in archive.namelist():
                    if ".so" not in Path(name).name:
                        continue
                    target = Path(tmp) / Path(name).name
                    target.write_bytes(archive.read(name))
                    elf, ptx = (subprocess.run([tool, option, str(target)], capture_output=True, text=True)
                                for option in ("--list-elf", "--list-ptx"))
                    handle.write(f"$ cuobjdump --list-elf {name}\n{elf.stdout}{elf.stderr}"
                                 f"$ cuobjdump --list-ptx {name}\n{ptx.stdout}{ptx.stderr}")
                    archs = {a for a in wanted if f".{a}." in elf.stdout}
                    if archs or "sm_" in elf.stdout:
                        found[Path(name).name] = archs
                        found_ptx[Path(name).name] = {a for a in wanted_ptx if f".{a}.ptx" in ptx.stdout}
                    target.unlink()
    if not found:
        return {"ok": False, "numbers": {}, "detail": "CUDA build, but no library holds SASS"}
    missing = [a for a in wanted if not any(a in archs for archs in found.values())]
    # Every CUDA library needs the PTX: each is loaded on its own.
    missing_ptx = [f"{lib}: {a}" for lib, archs in found_ptx.items() for a in wanted_ptx if a not in archs]
    numbers = {f"sass.{a}": int(any(a in archs for archs in found.values())) for a in wanted}
    numbers.update({f"ptx.{a}": int(all(a in archs for archs in found_ptx.values())) for a in wanted_ptx})
    libs = ", ".join(f"{lib}: {' '.join(sorted(archs)) or 'none'} + PTX {' '.join(sorted(found_ptx[lib])) or 'none'}"
                     for lib, archs in found.items())
    if missing or missing_ptx:
        problems = ([f"SASS missing for {' '.join(missing)}"] if missing else []) + \
                   ([f"PTX missing ({', '.join(missing_ptx)})"] if missing_ptx else [])
        return {"ok": False, "numbers": numbers, "detail": f"{'; '.join(problems)} ({libs})"}
    return {"ok": True, "numbers": numbers,
            "detail": f"SASS {' '.join(wanted)}, PTX {' '.join(wanted_ptx)} ({libs})"}
