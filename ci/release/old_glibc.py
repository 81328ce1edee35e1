"""The default variant's wheels on a glibc older than the build machine's (a step of nox -s release).

The wheels claim manylinux_2_28 or older: auditwheel and ci/artifacts/wheels.py check the symbol versions
they reference. This runs them on a real older glibc: the Debian release of the release profile's
`old_glibc:` (matrix.yaml), debootstrapped once into opforge's cache and entered with chroot in a
private mount namespace, with its own python3 and the pins listed there, installed offline from
wheels fetched on this machine for that python. In it:

- opforge-ort runs every op of the spec in that ONNX Runtime, checked against opforge-spec's
  float64 references within its float32 tolerances;
- opforge-loader loads its shipped plugins and runs the same ops;
- opforge-torch's library (its wheel needs Python >= 3.10, which that release may lack) is loaded
  with RTLD_NOW after torch's own libraries: every symbol it binds resolves (dlsym, pthread, libstdc++)
  and its operator registration runs.

It needs root, debootstrap and `unshare --mount`; where one is missing (a container without
CAP_SYS_ADMIN) the result says `skipped: <why>`, never ok.
"""
from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from ci.provision import apt, container, debian

# The check program, a file of its own: run inside the old release, never imported here.
CHECK = Path(__file__).with_name("old_glibc_check.py")

# Inside a private mount namespace: proc, and the work folder (torch's libraries bound into its
# torch-lib) at INSIDE under the root; pip and the check run there, with an empty environment but
# PATH.
INSIDE = "opforge-check"
ENTER = r'''
set -eu
root=$1 work=$2 torch_lib=$3 inside=$4
shift 4
mkdir -p "$root/$inside" "$work/torch-lib"
mount -t proc proc "$root/proc"
mount --bind "$work" "$root/$inside"
mount --bind "$torch_lib" "$root/$inside/torch-lib"
exec chroot "$root" env -i HOME="/$inside" PATH="$PATH" sh -c 'cd && python3 -m venv venv &&
  venv/bin/pip install --quiet --no-index --find-links wheels "$@" && venv/bin/python check.py "$HOME"' \
  check "$@"
'''


class OldGlibcError(RuntimeError):
    """The check ran and failed: the message names the step and the log."""


def unavailable() -> str | None:
    """Why this machine cannot run the check (None: it can)."""
    if os.geteuid() != 0:
        return "needs root (debootstrap, chroot)"
    if not shutil.which("debootstrap"):
        return "no debootstrap here (apt-get install debootstrap)"
    if subprocess.run(["unshare", "--mount", "true"], capture_output=True).returncode != 0:
        return "`unshare --mount` is not permitted here (a container without CAP_SYS_ADMIN)"
    return None


def _run(command: list[str], log: Path, what: str) -> str:
    with open(log, "a") as handle:
        handle.write(f"\n$ {' '.join(map(str, command))}\n")
        done = subprocess.run(command, capture_output=True, text=True)
        handle.write(done.stdout + done.stderr)
    if done.returncode != 0:
        raise OldGlibcError(f"{what} failed (exit {done.returncode}; see {log})")
    return done.stdout


def rootfs(suite: str, log: Path) -> Path:
    """A minimal Debian `suite` with python3 and venv, made once in opforge's cache."""
    root = debian.cache_root() / "rootfs" / f"{suite}-python3"
    if (root / ".opforge-ready").exists():
        return root
    partial = root.with_name(root.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    print(f"opforge: debootstrapping Debian {suite} (once, into {root.parent})", flush=True)
    _run(["debootstrap", "--variant=minbase", "--include=python3,python3-venv",
          f"--keyring={apt.KEYRING}", suite, str(partial), debian.mirror()],
         log, f"debootstrap {suite}")
    (partial / ".opforge-ready").write_text(suite + "\n")
    shutil.rmtree(root, ignore_errors=True)
    partial.rename(root)
    return root


def python_of(root: Path, log: Path) -> tuple[str, str]:
    """(python version as "3.9", glibc version as "2.31") of the rootfs."""
    probe = "import os, sys; print('%d.%d' % sys.version_info[:2], os.confstr('CS_GNU_LIBC_VERSION').split()[-1])"
    python, glibc = _run(["chroot", str(root), "python3", "-c", probe], log, "python3 in the rootfs").split()
    return python, glibc


def fetch_wheels(pins: list[str], python: str, glibc: str, dest: Path, log: Path) -> None:
    """The pins' wheels (and their dependencies) for that python and glibc."""
    command = [sys.executable, "-m", "pip", "download", "--quiet", "-d", str(dest),
               *container.pip_target(python, glibc, platform.machine()), *pins]
    _run(command, log, f"pip download {' '.join(pins)} for python {python}")


def check(config, variant: str, wheels: list[Path], torch_lib: Path, out: Path, log: Path) -> dict:
    """Run CHECK in the old-glibc rootfs over the variant's wheels (opforge-spec's among them: the
    references and tolerances); a smoke result for release.md."""
    started = time.monotonic()
    name = f"{variant} on Debian {config.debian}"
    why = unavailable()
    if why:
        return {"variant": name, "ok": True, "skipped": why, "steps": [], "seconds": 0}
    root = rootfs(config.debian, log)
    python, glibc = python_of(root, log)
    work = out / "old-glibc"
    shutil.rmtree(work, ignore_errors=True)
    (work / "wheels").mkdir(parents=True)
    fetch_wheels(list(config.packages), python, glibc, work / "wheels", log)
    ours = {w.name.split("-")[0]: w for w in wheels}
    for dist in ("opforge_spec", "opforge_ort", "opforge_loader"):
        shutil.copy2(ours[dist], work / "wheels")
    with zipfile.ZipFile(ours["opforge_torch"]) as archive:
        archive.extractall(work / "opforge_torch")
    shutil.copyfile(CHECK, work / "check.py")
    wanted = [*config.packages, "opforge-spec", "opforge-ort", "opforge-loader"]
    shown = _run(["unshare", "--mount", "--propagation", "private", "sh", "-c", ENTER, "enter",
                  str(root), str(work), str(torch_lib), INSIDE, *wanted], log,
                 f"the check on Debian {config.debian} (glibc {glibc})")
    shutil.rmtree(work, ignore_errors=True)
    steps = [f"glibc {glibc}, python {python}"] + [line for line in shown.splitlines()
                                                   if line.startswith("opforge")]
    return {"variant": name, "ok": True, "steps": steps,
            "seconds": round(time.monotonic() - started)}
