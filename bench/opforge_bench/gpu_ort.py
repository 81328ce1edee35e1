"""The ONNX Runtime layer of the GPU bench: opforge_ort's CUDA kernels against ORT's own fused
CUDA ops (SimplifiedLayerNormalization, QuickGelu) and the decomposed graph with and without ORT's
fusions, on the CUDA execution provider (onnxruntime-gpu); fp32 forward at the largest shapes
(the graphs of ort_variants), IOBinding into a preallocated output on the device.

A host clock around each run: ORT synchronizes its CUDA stream at the end of a run. Every node
must run on the GPU (no silent fallback to the CPU kernels). device="cpu" runs the same code on
the CPU execution provider (bench/tests)."""
from __future__ import annotations

import numpy as np
import torch

import opforge_spec

from . import gpu
from . import gpu_report as plan

OPS = tuple(opforge_spec.OPS)  # ort_variants has graphs for every op (its decomposed form at least)


def unavailable(device: str) -> str:
    """"" when ORT can run on `device` here, else why not."""
    try:
        import onnxruntime as ort
    except ImportError as err:
        return f"onnxruntime not importable: {gpu.why(err)}"
    if device == "cuda" and "CUDAExecutionProvider" not in ort.get_available_providers():
        return (f"onnxruntime {ort.__version__} has no CUDAExecutionProvider (a CPU build; "
                "onnxruntime-gpu has it)")
    return ""


def _library(device: str) -> tuple:
    """(opforge_ort's library or None, why not)."""
    try:
        import opforge_ort
    except ImportError as err:
        return None, f"opforge_ort not importable: {gpu.why(err)}"
    if device == "cuda" and not opforge_ort.build_info().get("cuda"):
        return None, "opforge_ort was built without CUDA (no OPFORGE_CUDA_HOME)"
    return opforge_ort.library_path(), ""


def _session(model: bytes, level, device: str, lib):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = level
    options.log_severity_level = 3
    if lib:
        options.register_custom_ops_library(lib)
    if device == "cuda":
        options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    providers = ["CUDAExecutionProvider"] if device == "cuda" else ["CPUExecutionProvider"]
    return ort.InferenceSession(model, options, providers=providers)


def sessions(op: str, width: int, device: str) -> tuple:
    """({variant: session}, {variant: why not})."""
    import onnxruntime as ort

    from . import ort_variants

    levels = ort.GraphOptimizationLevel
    lib, no_lib = _library(device)
    made, missing = {}, {}
    for name, model in ort_variants.MODELS[op](width).items():
        if name == "opforge_ort" and not lib:
            missing[f"ORT {name}"] = no_lib
            continue
        wanted = ([("ORT composed, no fusion (ORT_DISABLE_ALL)", levels.ORT_DISABLE_ALL),
                   ("ORT composed (ORT_ENABLE_ALL)", levels.ORT_ENABLE_ALL)] if name == "composed"
                  else [(f"ORT {name}" if name != "opforge_ort" else "opforge_ort", levels.ORT_ENABLE_ALL)])
        for label, level in wanted:
            try:
                made[label] = _session(model, level, device, lib if name == "opforge_ort" else None)
            except Exception as err:  # noqa: BLE001  e.g. an op without a CUDA kernel: reported
                missing[label] = gpu.why(err)
    return made, missing


def _x_shape(spec: opforge_spec.OpSpec, tokens: int, width: int) -> tuple:
    """X's shape by the spec's shape rule (a residual R has X's shape too)."""
    return (tokens * width,) if spec.layout == "elementwise" else (tokens, spec.split * width)


def _shapes(spec: opforge_spec.OpSpec, tokens: int, width: int) -> dict:
    """Each tensor of the op by the spec's names: its inputs (a weight W [width], the others X's
    shape) and its outputs (each by its shape rule)."""
    x = _x_shape(spec, tokens, width)
    shapes = {name: (width,) if name == "W" else x for name in spec.inputs}
    shapes.update({name: spec.output_shape_of(name, x) for name in spec.outputs})
    return shapes


def _dtypes(spec: opforge_spec.OpSpec) -> dict:
    """Each tensor's dtype name for float32 X and the spec's default attributes: inputs float32,
    each output by its dtype rule (X's, a fixed one, or the one its enum attribute picks)."""
    return {**{name: "float32" for name in spec.inputs},
            **{name: spec.output_dtype(name, "float32") for name in spec.outputs}}


def _feeds(spec: opforge_spec.OpSpec, shapes: dict) -> dict:
    """The graph inputs (a weight W is an initializer of every model: ort_variants)."""
    rng = np.random.default_rng(0)
    return {name: rng.standard_normal(shapes[name], dtype=np.float32)
            for name in spec.inputs if name != "W"}


def _runner(sess, spec: opforge_spec.OpSpec, feeds: dict, shapes: dict, device: str):
    """(run, read the first output as numpy) through IOBinding: every input and output on
    `device`."""
    import onnxruntime as ort

    binding = sess.io_binding()
    for name, array in feeds.items():
        binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(array, device, 0))
    dtypes, first = _dtypes(spec), None
    for name in spec.outputs:
        if dtypes[name] in _NUMPY:  # preallocated on the device
            value = ort.OrtValue.ortvalue_from_shape_and_type(shapes[name], _NUMPY[dtypes[name]], device, 0)
            binding.bind_ortvalue_output(name, value)
            first = value if first is None else first
        else:  # a type numpy lacks (float8): ORT allocates it on the device
            binding.bind_output(name, device)
    read = first.numpy if first is not None else (lambda: binding.copy_outputs_to_cpu()[0])
    return (lambda: sess.run_with_iobinding(binding)), read


# Output dtypes numpy holds (an OrtValue is preallocated for them); the bytes of each dtype.
_NUMPY = {"float32": np.float32, "int8": np.int8}
_ITEMSIZE = {"float32": 4, "int8": 1, "float8_e4m3fn": 1}


def moved_bytes(spec: opforge_spec.OpSpec, shapes: dict) -> int:
    """Bytes a fused kernel reads and writes for float32 X: every input once, every output once
    in its own dtype."""
    dtypes = _dtypes(spec)
    return sum(_ITEMSIZE[dtypes[name]] * int(np.prod(shapes[name]))
               for name in (*spec.inputs, *spec.outputs))


def measure_op(op: str, tokens: int, width: int, *, device: str, reasons: dict) -> list:
    """Rows of the ORT variants of one op (layer "ort"), each against a copy of the same bytes."""
    spec = opforge_spec.OPS[op]
    shapes = _shapes(spec, tokens, width)
    feeds = _feeds(spec, shapes)
    moved = moved_bytes(spec, shapes)
    timer = gpu.CudaTimer(torch.device("cuda")) if device == "cuda" else gpu.HostTimer()
    copy = gpu._time_copy(moved, device, timer, flush=False)
    base = {"layer": "ort", "op": op, "dtype": "float32", "mode": "forward", "tokens": tokens,
            "width": width, "bytes": moved, "l2_flushed": False,
            "copy_gbps": moved / copy.median_s / 1e9}
    made, missing = sessions(op, width, device)
    reasons.update({f"{op} {k}": v for k, v in missing.items()})
    rows, reference = [], None
    for label, sess in made.items():
        fn, read = _runner(sess, spec, feeds, shapes, device)
        timing = gpu.measure(fn, gpu.HostTimer(), flush=False)
        sample = np.asarray(read(), dtype=np.float64).reshape(-1)[: 1 << 20]
        reference = sample if reference is None else reference
        scale = max(float(np.abs(reference).max()), 1e-30)
        rows.append({**gpu._row(base, label, timing),
                     "max_rel_diff": float(np.abs(sample - reference).max()) / scale})
    return rows


def measure_all(*, device: str, ops=OPS, tokens: int | None = None, log=print) -> dict:
    """Every ORT op at its largest shape (or `tokens` x the smallest width, for a quick check)."""
    why = unavailable(device)
    if why:
        return {"rows": [], "not_measured": {"ONNX Runtime": why}, "state": f"skipped: {why}"}
    rows: list = []
    reasons: dict = {}
    for op in ops:
        t, w = plan.largest(op) if tokens is None else (tokens, min(plan.widths(op)))
        rows += measure_op(op, t, w, device=device, reasons=reasons)
        log(f"  ORT {op} [{t}, {w}]: {len(rows)} rows")
    return {"rows": rows, "not_measured": reasons, "state": "measured"}
