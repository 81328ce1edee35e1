"""What nvcc makes of the CUDA kernels (cuda.cuh), read without a GPU: every kernel instance of
cuda_instances.cu compiled for sm_90, then its SASS (nvdisasm), PTX and ptxas resource report
checked for the kernels' habits: 128-bit loads and stores where packets are 16 bytes, no spills
and no stack frame, no subroutine call (no 64-bit division, no IEEE-division slow path), no
atomics, float math; and the kernels compile spill-free for every GPU arch the toolkit knows."""
import re
import subprocess
from pathlib import Path

import cuda_tools
import pytest

import opforge_spec as spec

HERE = Path(__file__).parent
ARCH = "90"
OLDEST_SHIPPED_ARCH = 75
DTYPES = {"float": 4, "__half": 2, "__nv_bfloat16": 2}
# W's types beside each X type: X's, and float beside a 16-bit X (a mixed-dtype call)
WEIGHT_TYPES = {"float": ("float",), "__half": ("__half", "float"), "__nv_bfloat16": ("__nv_bfloat16", "float")}
ROW_KERNELS = ("row_norm_forward_kernel", "row_norm_backward_kernel")
GATED_KERNELS = ("gated_forward_kernel", "gated_backward_kernel")
NS = "opforge::kernels::"


def family(name: str) -> list:
    """The ops of a launcher family (OpSpec.family), in spec order."""
    return [op for op in spec.OPS.values() if op.family == name]


def op_kernels(dtype: str, v: int) -> list:
    """Each op's kernel instances for a storage type and packet width, by its family's launchers."""
    names = []
    for op in family("elementwise"):
        fn = f"{NS}{op.name}Math<{NS}Sigmoid>"
        names += [f"elementwise_kernel<{dtype}, {v}, {NS}cuda::detail::ValueOp<{fn} >, 1>",
                  f"elementwise_kernel<{dtype}, {v}, {NS}cuda::detail::SlopeOp<{fn} >, 2>"]
    names += [f"{k}<{dtype}, {v}, {NS}{op.name}Math<{NS}Sigmoid> >"  # c++filt: "> >"
              for k in GATED_KERNELS for op in family("gated")]
    for residual, ops in (("false", family("row_norm")), ("true", family("residual_row_norm"))):
        names += [f"{k}<{dtype}, {w}, {v}, {cached}, {residual}, {NS}{op.name}Math>"
                  for k in ROW_KERNELS for op in ops for cached in ("true", "false") for w in WEIGHT_TYPES[dtype]]
    return names


def demangle(names):
    tool = cuda_tools.find("c++filt")
    if tool is None:
        pytest.skip("no c++filt (binutils) to read the kernel names")
    out = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True, check=True)
    return dict(zip(names, out.stdout.splitlines()))


def tool_or_skip(name):
    tool = cuda_tools.find(name)
    if tool is None:
        pytest.skip(f"no {name} (set OPFORGE_CUDA_HOME): the CUDA kernels are not compiled here")
    return tool


def compile_ptx(arch: str, out: Path) -> str:
    """cuda_instances.cu's device code as PTX for compute_<arch>."""
    done = subprocess.run([tool_or_skip("nvcc"), "-std=c++17", f"-I{spec.include_dir()}",
                           f"-arch=compute_{arch}", f"-DOPFORGE_CUDA_SASS_ARCHS={arch}",
                           f"-DOPFORGE_CUDA_PTX_ARCHS={arch}", "-ptx", str(HERE / "cuda_instances.cu"),
                           "-o", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-4000:]
    return out.read_text()


def assemble(ptx: Path, archs, folder: Path) -> dict:
    """ptxas -v of `ptx` for each sm_<arch>, run side by side: {arch: (cubin, report)}."""
    ptxas = tool_or_skip("ptxas")
    runs = {a: subprocess.Popen([ptxas, f"-arch=sm_{a}", "-v", str(ptx), "-o", str(folder / f"{a}.cubin")],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for a in archs}
    reports = {a: run.communicate()[0] for a, run in runs.items()}
    for a, run in runs.items():
        assert run.returncode == 0, f"sm_{a}: {reports[a][-4000:]}"
    return {a: (str(folder / f"{a}.cubin"), reports[a]) for a in archs}


def compile_instances(folder: Path) -> dict:
    ptx = compile_ptx(ARCH, folder / "instances.ptx")
    cubin, report = assemble(folder / "instances.ptx", [ARCH], folder)[ARCH]
    return {"cubin": cubin, "ptx": ptx, "ptxas": report}


@pytest.fixture(scope="module")
def build(run_once):
    return run_once("cuda_codegen", compile_instances)


def ptxas_resources(report: str) -> dict:
    """Kernel (mangled) -> its 'N bytes stack frame, N bytes spill stores, N bytes spill loads'."""
    found, current = {}, None
    for line in report.splitlines():
        named = re.search(r"Function properties for (\S+)", line)
        if named:
            current = named.group(1)
        frame = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if frame and current:
            found[current] = tuple(int(v) for v in frame.groups())
    return found


def by_function(listing: str, header: str) -> dict:
    """Split a disassembly into {mangled kernel: its text} on `header` lines naming each one."""
    parts = re.split(header, listing)
    return dict(zip(parts[1::2], parts[2::2]))


def readable(functions: dict) -> dict:
    """{'gated_forward_kernel<float, 4, ...SwiGLUMath<...> >': text, ...}: the kernel name and template arguments."""
    names = demangle(list(functions))
    out = {}
    for mangled, text in functions.items():
        name = re.sub(r"\(.*", "", names[mangled])
        out[re.sub(r"^void opforge::kernels::cuda::detail::", "", name)] = text
    return out


@pytest.fixture(scope="module")
def sass(build):
    nvdisasm = cuda_tools.find("nvdisasm")
    if nvdisasm is None:
        pytest.skip("no nvdisasm to read the SASS (the suite installs nvidia-cuda-nvdisasm; or set "
                    "OPFORGE_NVDISASM)")
    listing = subprocess.run([nvdisasm, "-c", build["cubin"]], capture_output=True, text=True,
                             check=True).stdout
    return readable(by_function(listing, r"//-+ \.text\.(\S+) -+\n"))


@pytest.fixture(scope="module")
def ptx(build):
    return readable(by_function(build["ptx"], r"\.visible \.entry (\w+)\("))


def expected_kernels():
    """Every instance the launchers can pick: each storage type, packet width, row path."""
    names = []
    for dtype, size in DTYPES.items():
        widths = [v for v in (1, 2, 4, 8) if v * size <= 16]
        for v in widths:
            names += op_kernels(dtype, v)
    return names + ["dw_sum_kernel<8u>"]


def widest(name: str) -> bool:
    """The instance whose packet is 16 bytes."""
    dtype, vec = re.search(r"<([\w:]+), (?:[\w:]+, )?(\d+)", name).groups()
    return DTYPES[dtype] * int(vec) == 16


def test_every_kernel_instance_is_built(ptx, build):
    assert sorted(ptx) == sorted(expected_kernels())
    assert len(ptxas_resources(build["ptxas"])) == len(expected_kernels())


def test_no_kernel_spills_or_has_a_stack_frame(build):
    resources = ptxas_resources(build["ptxas"])
    names = demangle(list(resources))
    bad = {names[k]: v for k, v in resources.items() if v != (0, 0, 0)}
    assert not bad, f"(stack frame, spill stores, spill loads) in bytes: {bad}"


def test_16_byte_packets_are_128_bit_loads_and_stores(sass):
    checked = [n for n in expected_kernels() if n != "dw_sum_kernel<8u>" and widest(n)]
    for name in checked:
        assert re.search(r"\bLDG\.E\.128", sass[name]), f"{name}: no LDG.E.128"
        assert re.search(r"\bSTG\.E\.128", sass[name]), f"{name}: no STG.E.128"


def test_ptx_moves_16_byte_packets_as_vectors(ptx):
    vector = r"\.v4\.(?:f32|u32|b32)|\.v2\.(?:u64|b64|f64)"
    for name in (n for n in ptx if n != "dw_sum_kernel<8u>" and widest(n)):
        assert re.search(rf"\bld\.global(?:\.nc)?(?:{vector})", ptx[name]), f"{name}: no 16-byte load"
        assert re.search(rf"\bst\.global(?:{vector})", ptx[name]), f"{name}: no 16-byte store"


def test_no_kernel_calls_a_subroutine(sass, ptx):
    """A 64-bit division or remainder (`i / d` per element) is a call to __cuda_sm20_div_s64 and
    friends; an IEEE division or sqrt has a slow-path call: each costs dozens of instructions and
    a stack frame."""
    for name, text in sass.items():
        assert "CALL" not in text, f"{name}: {re.findall(r'CALL[^;]*', text)[:3]}"
    for name, text in ptx.items():
        assert not re.search(r"\b(?:div|rem)\.[su]64\b|\bcall\b", text), name


def test_no_kernel_uses_atomics(sass, ptx):
    """RMSNorm's dW is reduced through partial rows in a fixed order (deterministic), never by
    atomicAdd into the columns."""
    for name, text in sass.items():
        assert not re.search(r"\b(?:ATOM|ATOMG|RED|REDG)\b", text), name
    for name, text in ptx.items():
        assert not re.search(r"\b(?:atom|red)\.", text), name
    source = (spec.include_dir() / "opforge" / "kernels" / "cuda.cuh").read_text()
    assert not re.search(r"\batomic\w*\s*\(", source)


def test_math_and_sums_are_float32(ptx):
    """Storage may be 16-bit; arithmetic (row sums and shuffles included) is float32."""
    for name, text in ptx.items():
        assert not re.search(r"\b(?:add|sub|mul|fma|neg)\.[\w.]*(?:f16|bf16)", text), name
        assert set(re.findall(r"\bshfl\.sync\.\w+\.(\w+)", text)) <= {"b32"}, name
    for name in (n for n in ptx if n.startswith(ROW_KERNELS)):
        assert "shfl.sync.bfly.b32" in ptx[name], name


def test_kernels_compile_spill_free_for_every_arch_of_the_toolkit(tmp_path):
    """One PTX (the oldest arch's) assembled for every real arch nvcc lists: the matrix's arch
    lists (7.5 ... 12.0) are among them, and ptxas allocates registers per arch. Spills are
    checked from sm_75 on (the oldest arch opforge ships; older toolkits list the sm_5x/6x Tegras,
    which spill a few bytes in the fp16 row kernels)."""
    listed = subprocess.run([tool_or_skip("nvcc"), "--list-gpu-code"], capture_output=True,
                            text=True, check=True).stdout.split()
    archs = sorted({a[3:] for a in listed if re.fullmatch(r"sm_\d+", a)}, key=int)
    compile_ptx(archs[0], tmp_path / "oldest.ptx")
    for arch, (_, report) in assemble(tmp_path / "oldest.ptx", archs, tmp_path).items():
        frames = ptxas_resources(report)
        assert len(frames) == len(expected_kernels()), f"sm_{arch}: {len(frames)} kernels"
        bad = [name for name, frame in frames.items() if frame != (0, 0, 0)]
        assert int(arch) < OLDEST_SHIPPED_ARCH or not bad, f"sm_{arch}: spills in {demangle(bad)}"
