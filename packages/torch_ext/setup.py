"""Build libopforge_torch.so.1 against the LibTorch stable ABI (torch >= 2.10).

Knobs (environment):
  OPFORGE_CUDA_HOME     toolkit root (bin/nvcc); unset or empty -> CPU-only build
  OPFORGE_CUDA_ARCHS    TORCH_CUDA_ARCH_LIST syntax, e.g. "8.0;9.0" (default "8.0;9.0"): SASS for
                        each, PTX for the highest (or for the entries marked "+PTX", if any)
  OPFORGE_KERNELS_INCLUDE_DIR  kernels/include of the shared math (default: the checkout's, then
                        the installed opforge_spec's); the op spec the build declares the ops
                        from (gen_schema.py) is the opforge_spec beside it, else the installed one
  OPFORGE_LOCAL_VERSION the variant's local version label, e.g. "cu130" -> version 0.1.0+cu130
                        (unset or empty: the plain version, the default variant's)
  MAX_JOBS              parallel compile jobs (default 2)

The wheel is tagged py3-none-<platform>: the library links LibTorch's stable C ABI, never Python,
so one wheel serves every CPython the torch release supports.
"""

import json
import os
import re
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import gen_schema  # noqa: E402  (beside setup.py: the ops' schemas and entry points, from the spec)

LIB_NAME = "libopforge_torch.so.1"
# Oldest torch whose stable ABI has what the kernels need (parallel_for, empty/new_zeros, contiguous, to).
TORCH_MIN = (2, 10)
DEFAULT_ARCHS = "8.0;9.0"
VERSION = "0.1.0"


def log(msg):
    print(f"[opforge-torch] {msg}", file=sys.stderr, flush=True)


def arch_entries(arch_list):
    """"8.0;9.0+PTX" -> [("8.0", False), ("9.0", True)]; exits naming a malformed entry."""
    entries = []
    for entry in arch_list.replace(",", ";").replace(" ", ";").split(";"):
        if not entry:
            continue
        match = re.fullmatch(r"(\d+)\.(\d+)([af]?)(\+PTX)?", entry)
        if not match:
            sys.exit(f"opforge-torch: OPFORGE_CUDA_ARCHS: expected entries like 8.0, 9.0a or 9.0+PTX, got '{entry}'")
        entries.append((match[1] + "." + match[2] + match[3], bool(match[4])))
    if not entries:
        sys.exit(f"opforge-torch: OPFORGE_CUDA_ARCHS='{arch_list}' lists no arch")
    return entries


def arch_number(arch):
    """"9.0a" -> (9, 0): the order of archs, variants aside."""
    return tuple(int(p) for p in arch.rstrip("af").split("."))


def with_ptx(arch_list):
    """The list with PTX for its highest arch (newer GPUs JIT it), unless it marks "+PTX" itself.

    An arch-specific highest arch ("9.0a") gets portable PTX beside it ("9.0+PTX"): compute_90a
    runs on 9.0 only. Returns (TORCH_CUDA_ARCH_LIST, SASS archs, PTX archs) as "80", "90a", ...
    """
    entries = arch_entries(arch_list)
    if not any(ptx for _, ptx in entries):
        highest = max((arch for arch, _ in entries), key=arch_number)
        portable = highest.rstrip("af")
        entries = [(arch, arch == highest == portable) for arch, _ in entries]
        if portable != highest:
            entries.append((portable, True))
    torch_list = ";".join(arch + ("+PTX" if ptx else "") for arch, ptx in entries)
    sass = list(dict.fromkeys(arch.replace(".", "") for arch, _ in entries))
    return torch_list, sass, [arch.replace(".", "") for arch, ptx in entries if ptx]


def requested_archs():
    arch_list = os.environ.get("OPFORGE_CUDA_ARCHS") or DEFAULT_ARCHS
    return [a for a in arch_list.replace(",", ";").replace(" ", ";").split(";") if a]


def cuda_home():
    home = os.environ.get("OPFORGE_CUDA_HOME", "").strip()
    if home:
        # Before importing cpp_extension: it reads CUDA_HOME once, and its autodetection can pick
        # a wrapper directory instead of the toolkit.
        os.environ["CUDA_HOME"] = home
        arch_list, _, _ = with_ptx(os.environ.get("OPFORGE_CUDA_ARCHS") or DEFAULT_ARCHS)
        os.environ["TORCH_CUDA_ARCH_LIST"] = arch_list
    return home


CUDA_HOME = cuda_home()
os.environ.setdefault("MAX_JOBS", "2")

try:
    import torch
    from torch.utils import cpp_extension
except ImportError:
    sys.exit("opforge-torch: torch is not installed. The library is compiled against the "
             "environment's torch: install torch, then `pip install --no-build-isolation`.")


def torch_release():
    return tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])


def check_torch(with_cuda):
    if torch_release() < TORCH_MIN:
        sys.exit(
            f"opforge-torch: torch {torch.__version__} is older than "
            f"{TORCH_MIN[0]}.{TORCH_MIN[1]}; the stable ABI this package builds on needs "
            f"torch >= {TORCH_MIN[0]}.{TORCH_MIN[1]}. Install a newer torch first."
        )
    if with_cuda and torch.version.cuda is None:
        sys.exit(
            f"opforge-torch: OPFORGE_CUDA_HOME is set but torch {torch.__version__} is a CPU "
            "build; install a CUDA torch or unset OPFORGE_CUDA_HOME for a CPU-only build."
        )


def kernels_include():
    """The shared kernel headers: explicit, else this checkout's, else the installed opforge_spec's."""
    explicit = os.environ.get("OPFORGE_KERNELS_INCLUDE_DIR")
    if explicit:
        return Path(explicit)
    in_tree = HERE.parent.parent / "kernels" / "include"
    if in_tree.is_dir():
        return in_tree
    try:
        import opforge_spec
    except ImportError:
        sys.exit("opforge-torch: kernel headers not found: build from the opforge checkout, "
                 "`pip install ./kernels` (opforge_spec) or set OPFORGE_KERNELS_INCLUDE_DIR")
    return Path(opforge_spec.include_dir())


def toolkit_include_dirs():
    """The toolkit's headers first, then torch's pip CUDA headers (cuBLAS & co.) that a bare
    system toolkit may lack: nvcc refuses runtime headers newer than itself (torch cu132's with
    nvcc 13.0: `CUDA compiler and CUDA toolkit headers are incompatible`)."""
    site = Path(torch.__file__).resolve().parent.parent / "nvidia"
    pip_dirs = [str(p) for p in (site / "cu13" / "include", site / "cu12" / "include") if p.is_dir()]
    return [str(Path(CUDA_HOME) / "include"), *pip_dirs]


def package_version():
    """VERSION, plus OPFORGE_LOCAL_VERSION as a PEP 440 local label (0.1.0+cu130)."""
    label = os.environ.get("OPFORGE_LOCAL_VERSION", "").strip()
    if label and not re.fullmatch(r"[a-z0-9]+(\.[a-z0-9]+)*", label):
        sys.exit(f"opforge-torch: OPFORGE_LOCAL_VERSION: expected a local version label such as "
                 f"cu130 (lower-case letters, digits, dots), got '{label}'")
    return f"{VERSION}+{label}" if label else VERSION


def variant(cuda):
    base = f"stable{TORCH_MIN[0]}.{TORCH_MIN[1]}"
    return f"{base}-cu{cuda.replace('.', '')}" if cuda else f"{base}-cpu"


def build_info(with_cuda):
    cuda = torch.version.cuda if with_cuda else None
    _, sass, ptx = with_ptx(os.environ["TORCH_CUDA_ARCH_LIST"]) if with_cuda else ("", [], [])
    return {
        "abi": "stable",
        "torch_built_against": torch.__version__,
        "torch_min": f"{TORCH_MIN[0]}.{TORCH_MIN[1]}",
        "cuda": cuda,
        "archs": requested_archs() if with_cuda else [],
        "sass": sass,
        "ptx": ptx,
        "cxx11_abi": bool(torch._C._GLIBCXX_USE_CXX11_ABI),
        "variant": variant(cuda),
    }


def extension(with_cuda):
    include = kernels_include()
    if not (include / "opforge" / "kernels" / "cpu.h").is_file():
        sys.exit(f"opforge-torch: shared kernels not found at {include} (set OPFORGE_KERNELS_INCLUDE_DIR)")
    target = f"-DTORCH_TARGET_VERSION=0x{TORCH_MIN[0]:02x}{TORCH_MIN[1]:02x}000000000000"
    # platform_floor.h: glibc 2.28 is enough at run time (manylinux_2_28), whatever glibc builds it.
    floor = str(include / "opforge" / "kernels" / "platform_floor.h")
    cxx = ["-O3", "-g0", "-fvisibility=hidden", "-fvisibility-inlines-hidden", target, "-DTORCH_STABLE_ONLY",
           "-include", floor]
    # torch adds -D__CUDA_NO_HALF_CONVERSIONS__ & co. (against clashes with c10::Half, unused here);
    # the shared kernels may convert __half/__nv_bfloat16 implicitly, so undo them.
    no_half = ["HALF_OPERATORS", "HALF_CONVERSIONS", "BFLOAT16_CONVERSIONS", "HALF2_OPERATORS"]
    nvcc = ["-O3", "-Xcompiler=-fvisibility=hidden", target, "-DTORCH_STABLE_ONLY", "-DUSE_CUDA", "-include", floor]
    nvcc += [f"-U__CUDA_NO_{name}__" for name in no_half]
    # libdl.so.2 kept even where libc defines dlsym: it defines it before glibc 2.34 (platform_floor.h)
    link = [f"-Wl,-soname,{LIB_NAME}", f"-Wl,--version-script={HERE / 'csrc' / 'exports.map'}",
            "-Wl,--no-undefined", "-Wl,--push-state,--no-as-needed,-l:libdl.so.2,--pop-state",
            "-Wl,--as-needed"]
    sources = ["csrc/schema.cpp", "csrc/checks.cpp", "csrc/cpu_ops.cpp"]
    kind = cpp_extension.CppExtension
    kwargs = {}
    if with_cuda:
        sources.append("csrc/cuda_ops.cu")
        _, sass, ptx = with_ptx(os.environ["TORCH_CUDA_ARCH_LIST"])
        # The arch guard's inputs (kernels/ cuda_arch_guard.h): '_'-separated, nothing to quote.
        nvcc += [f"-DOPFORGE_CUDA_SASS_ARCHS={'_'.join(sass)}", f"-DOPFORGE_CUDA_PTX_ARCHS={'_'.join(ptx)}"]
        kind = cpp_extension.CUDAExtension
        kwargs["include_dirs"] = [str(include)] + toolkit_include_dirs()
    else:
        kwargs["include_dirs"] = [str(include)]
    return kind(
        name="opforge_torch.libopforge_torch",
        sources=sources,
        extra_compile_args={"cxx": cxx, "nvcc": nvcc},
        extra_link_args=link,
        py_limited_api=True,  # no libtorch_python: the library loads without Python's torch bindings
        **kwargs,
    )


class PurePlatformWheel(bdist_wheel):
    """py3-none-<platform>: the library links no libpython (the wheel stage checks it)."""

    def get_tag(self):
        _, _, platform = super().get_tag()
        return "py3", "none", platform


class SourcesOnlySdist(sdist):
    """A symlink among the sources is refused, naming it: setuptools would pack its target, which
    may lie outside the package (an sdist holds the tracked sources only; MANIFEST.in lists them)."""

    def make_release_tree(self, base_dir, files):
        links = [name for name in files if any(p.is_symlink() for p in [Path(name), *Path(name).parents])]
        if links:
            shown = ", ".join(f"{name} ({Path(name).resolve()})" for name in links)
            sys.exit(f"opforge-torch: the sdist refuses symlinks among its sources ({shown}): "
                     "remove them or replace each with the file it names")
        super().make_release_tree(base_dir, files)


class BuildLibrary(cpp_extension.BuildExtension):
    """Names the output libopforge_torch.so.1 and writes _build_info.json and the ops' entry points
    (_ops_generated.py) beside it; compiles against the schemas it writes first (gen_schema.py)."""

    def get_ext_filename(self, ext_name):
        # Called with the full dotted name and (by get_ext_fullpath) with its last part alone.
        parts = ext_name.split(".")
        if parts[-1] == "libopforge_torch":
            return os.path.join(*parts[:-1], LIB_NAME)
        return super().get_ext_filename(ext_name)

    def run(self):
        # The ops' declarations from the spec this build compiles against: the schemas into the
        # build tree (an include directory of the extension), the entry points into the package.
        ops = gen_schema.load_spec(kernels_include().parent).OPS
        generated = Path(self.build_temp).resolve() / "opforge_generated"
        gen_schema.write_header(generated, ops)
        for ext in self.extensions:
            ext.include_dirs = [str(generated), *ext.include_dirs]
        super().run()
        info = build_info(WITH_CUDA)
        in_source = self.inplace or getattr(self, "editable_mode", False)
        for root in [self.build_lib] + ([str(HERE / "src")] if in_source else []):
            out = Path(root) / "opforge_torch" / "_build_info.json"
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(info, indent=2) + "\n")
            gen_schema.write_wrappers(out.parent, ops)
        what = (f"CUDA {info['cuda']}: SASS {' '.join('sm_' + a for a in info['sass'])}, "
                f"PTX {' '.join('compute_' + a for a in info['ptx'])}") if WITH_CUDA else "CPU only (no CUDA)"
        log(f"built {LIB_NAME}: {what}; variant {info['variant']}, torch {torch.__version__}")


WITH_CUDA = bool(CUDA_HOME)
check_torch(WITH_CUDA)
log(
    f"CUDA build: {'yes, ' + CUDA_HOME + ', archs ' + os.environ['TORCH_CUDA_ARCH_LIST'] if WITH_CUDA else 'no (OPFORGE_CUDA_HOME unset)'}"
)

setup(
    version=package_version(),
    ext_modules=[extension(WITH_CUDA)],
    cmdclass={"build_ext": BuildLibrary.with_options(no_python_abi_suffix=True),
              "bdist_wheel": PurePlatformWheel, "sdist": SourcesOnlySdist},
)
