"""Every CUDA launch runs on the caller's stream, read from the sources (no GPU needed): each
<<<>>> in cuda.cuh names the launcher's stream, each launcher takes one, nothing synchronizes;
and each layer passes its runtime's stream to every launcher it calls: torch's current stream,
ONNX Runtime's compute stream, TensorRT's enqueue stream. The GPU twin (gpu/) runs every launcher
behind a blocked stream and sees that nothing ran."""
import re
from pathlib import Path

import pytest

import opforge_spec as spec

REPO = Path(__file__).resolve().parents[2]
KERNELS = spec.include_dir() / "opforge" / "kernels"
NO_STREAM = {"0", "nullptr", "NULL", "{}", "cudaStreamLegacy", "cudaStreamPerThread", "0x1", "0x2"}

# Each layer file that calls the shared launchers: the calls, the argument that must be their
# stream, and where that stream comes from (the runtime's own API or entry point).
LAYERS = {
    "packages/torch_ext/csrc/cuda_ops.cu": (
        r"Op::(?:forward|backward)|k::cuda::(?:swish|swiglu|rms_norm)_(?:forward|backward)\b",
        r"launch_stream\(.*\)",
        r"aoti_torch_get_current_cuda_stream\("),
    "packages/ort_plugin/csrc/cuda_kernels.cu": (
        r"kc::forward_by_desc", r"s", r"const auto s = static_cast<cudaStream_t>\(stream\);"),
    "packages/ort_plugin/csrc/ops.cc": (
        r"cuda::forward", r"stream", r"KernelContext_GetGPUComputeStream\(ctx, stream\)"),
    "packages/trt_plugin/csrc/cuda_launch.cu": (
        r"kc::forward_by_desc", r"s", r"AttrValues& attrs,\s*cudaStream_t s\)"),
    "packages/trt_plugin/csrc/plugin.cc": (
        r"cuda::forward", r"stream", r"Plugin::enqueue\([^)]*cudaStream_t stream\)"),
}


def code(path: Path, after: str = "") -> str:
    """The source (from the line `after` on) without comments or string literals."""
    text = path.read_text()
    text = text[text.index(after):] if after else text
    text = re.sub(r"//[^\n]*|/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r'"(?:\\.|[^"\\])*"', '""', text)


def arguments(text: str, start: int) -> list:
    """The top-level, comma-separated arguments of the call whose '(' is at text[start]."""
    depth, current, args = 0, "", []
    for ch in text[start:]:
        if ch in "([{":
            depth += 1
            if depth == 1:
                continue
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                return args + [current.strip()]
        if ch == "," and depth == 1:
            args.append(current.strip())
            current = ""
        else:
            current += ch
    raise AssertionError(f"unbalanced call at {text[start:start + 80]!r}")


def calls(text: str, name: str) -> list:
    """The arguments of every call of `name` (a regex), template arguments allowed."""
    pattern = rf"\b(?:{name})\s*(?:<[\w:, ]*>)?\s*\("
    return [arguments(text, m.end() - 1) for m in re.finditer(pattern, text)]


def launches(text: str) -> list:
    return [[a.strip() for a in m.group(1).split(",")] for m in re.finditer(r"<<<(.*?)>>>", text, re.S)]


def test_every_kernel_launch_names_the_launchers_stream():
    text = code(KERNELS / "cuda.cuh") + code(KERNELS / "quant_rows_cuda.cuh")
    found = launches(text)
    assert len(found) >= 7, found  # elementwise, 2 gated, 2 rows, the dW sum, the quantized rows
    for config in found:
        assert len(config) == 4 and config[3] == "s", f"<<<{', '.join(config)}>>>"


def launchers(text: str) -> list:
    """(name, parameters) of each cudaError_t function defined in `text`."""
    return [(m.group(1), arguments(text, m.end() - 1))
            for m in re.finditer(r"\n\s*(?:static )?cudaError_t (\w+)\s*\(", text)]


def test_every_launcher_takes_a_stream_and_never_synchronizes():
    public = {"cuda.cuh": code(KERNELS / "cuda.cuh", after="}  // namespace detail"),
              "cuda_ops.cuh": code(KERNELS / "cuda_ops.cuh"),
              "quant_rows_cuda.cuh": code(KERNELS / "quant_rows_cuda.cuh")}
    for header, text in public.items():
        found = launchers(text)
        assert len(found) >= (3 if header == "quant_rows_cuda.cuh" else 6), (header, found)
        for name, params in found:
            assert params[-1] == "cudaStream_t s", f"{header}: {name}({', '.join(params)})"
    for header in ("cuda.cuh", "cuda_ops.cuh", "quant_rows_cuda.cuh"):
        text = code(KERNELS / header)
        runtime = set(re.findall(r"\b(cuda[A-Z]\w*)\s*\(", text))
        assert runtime <= {"cudaGetLastError", "cudaMemsetAsync"}, f"{header}: {runtime}"
        for args in calls(text, "cudaMemsetAsync"):
            assert args[-1] == "s", args


@pytest.mark.parametrize("path", list(LAYERS))
def test_layer_passes_its_runtimes_stream_to_every_launch(path):
    source = REPO / path
    if not source.is_file():
        pytest.skip(f"{path} is not in this checkout (an installed opforge_spec without the repo)")
    text = code(source)
    callee, stream, origin = LAYERS[path]
    found = calls(text, callee)
    assert found, f"{path}: no call of {callee}"
    for args in found:
        assert args[-1] not in NO_STREAM and re.fullmatch(stream, args[-1]), \
            f"{path}: {callee}({', '.join(args)}) does not pass the runtime's stream"
    assert re.search(origin, text), f"{path}: the stream's origin ({origin}) is gone"
    assert not launches(text), f"{path}: launches a kernel itself; use the shared launchers"


def test_every_file_that_launches_is_checked():
    """A new layer file calling the shared launchers joins LAYERS (and so this check)."""
    if not (REPO / "packages").is_dir():
        pytest.skip("no packages/ beside kernels/ (an installed opforge_spec without the repo)")
    uses = {str(p.relative_to(REPO)) for p in REPO.glob("packages/*/csrc/**/*")
            if p.suffix in (".cu", ".cc", ".cpp", ".c", ".h", ".cuh")
            and re.search(r"\bcuda::forward\b|forward_by_desc|k::cuda::\w+\s*[<(]|<<<", code(p))}
    assert uses <= set(LAYERS), uses - set(LAYERS)


def test_a_default_stream_would_be_caught(tmp_path):
    """The check can fail: a launcher call on stream 0 is reported."""
    bad = tmp_path / "bad.cu"
    bad.write_text("void f(cudaStream_t stream) { cuda::forward(op, t, x, w, y, r, c, a, 0); }\n")
    args = calls(code(bad), "cuda::forward")[0]
    assert args[-1] in NO_STREAM
