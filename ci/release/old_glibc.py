"""The default variant's wheels on a glibc older than the build machine's (a step of nox -s release).

The wheels claim manylinux_2_28 or older: auditwheel and ci/wheels.py check the symbol versions
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

from ci import debian

CHECK = r'''
import ctypes, glob, os, sys
import numpy as np

work = sys.argv[1]  # the work folder, as the chroot sees it

print("glibc", os.confstr("CS_GNU_LIBC_VERSION").split()[-1], "python", sys.version.split()[0])
import opforge_spec as spec

ops = spec.OPS
# Per op of the spec, its first case with attributes set (their passing is checked too), if any.
cases = {name: next((c for c in op.cases("float32") if c.attrs), op.cases("float32")[0])
         for name, op in ops.items()}
inputs = {name: [np.asarray(a, np.float32) for a in case.inputs] for name, case in cases.items()}
attrs = {name: case.attrs for name, case in cases.items()}
expected = {op: ops[op].reference(*inputs[op], **attrs[op]) for op in ops}


def agree(what, got, op):  # the spec's float32 tolerance against its float64 reference
    ops[op].check_close(got, expected[op], "float32", inputs[op], what)


for name in ("libc10.so", "libtorch_cpu.so"):
    ctypes.CDLL(os.path.join(work, "torch-lib", name), mode=ctypes.RTLD_GLOBAL)
ours = sorted(glob.glob(os.path.join(work, "opforge_torch", "**", "libopforge_torch*.so*"), recursive=True))
assert ours, "no opforge_torch library in the unpacked wheel"
ctypes.CDLL(ours[0], mode=os.RTLD_NOW | os.RTLD_LOCAL)
print("opforge_torch: loaded with RTLD_NOW next to torch's libraries")

import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

import opforge_ort

for op, feeds in inputs.items():
    names = list(ops[op].inputs)
    node = helper.make_node(op, names, ["Y"], domain="opforge", **attrs[op])
    graph = helper.make_graph(
        [node], op, [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in names],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("opforge", 1)])
    model.ir_version = 8
    session = ort.InferenceSession(model.SerializeToString(), opforge_ort.session_options(),
                                   providers=["CPUExecutionProvider"])
    agree("onnxruntime " + ort.__version__, session.run(None, dict(zip(names, feeds)))[0], op)
print("opforge_ort:", ", ".join(ops), "in onnxruntime", ort.__version__)

import opforge_loader

registry = opforge_loader.Registry(opforge_loader.plugin_dir())
for op, feeds in inputs.items():
    agree("opforge_loader", registry.run(op, feeds, attrs[op]), op)
print("opforge_loader:", ", ".join(ops), "through the shipped plugin")
'''

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
          f"--keyring={debian.KEYRING}", suite, str(partial), debian.mirror()],
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
    from ci import container

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
    (work / "check.py").write_text(CHECK)
    wanted = [*config.packages, "opforge-spec", "opforge-ort", "opforge-loader"]
    shown = _run(["unshare", "--mount", "--propagation", "private", "sh", "-c", ENTER, "enter",
                  str(root), str(work), str(torch_lib), INSIDE, *wanted], log,
                 f"the check on Debian {config.debian} (glibc {glibc})")
    shutil.rmtree(work, ignore_errors=True)
    steps = [f"glibc {glibc}, python {python}"] + [line for line in shown.splitlines()
                                                   if line.startswith("opforge")]
    return {"variant": name, "ok": True, "steps": steps,
            "seconds": round(time.monotonic() - started)}
