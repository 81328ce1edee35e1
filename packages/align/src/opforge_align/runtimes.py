"""The runtimes a model is run in. Each takes the model (with the tensors to compare marked as
outputs) and the feeds, and returns {tensor name: array}.

  ort        ONNX Runtime, CPU provider (opforge_ort's library registered for opforge nodes)
  ort-cuda   ONNX Runtime's CUDA provider (onnxruntime-gpu and a GPU)
  reference  onnx's ReferenceEvaluator in float64, opforge ops from the op spec
  trt        TensorRT with opforge_trt's plugins (a GPU and a TensorRT runtime)
  torch      the torch.export program given with --exported-program (torch.export.save's .pt2;
             opforge_torch imported when it calls torch.ops.opforge.*), fed the ONNX graph inputs
             in order; returns the graph outputs only, under their ONNX names (intermediate
             torch tensors have none)

A runtime that cannot run here says why in one line (`unavailable`); the run stops there, exit 2,
unless --skip-unavailable.
"""
from __future__ import annotations

import numpy as np

import opforge_spec as spec

from . import reference
from .errors import AlignError

NAMES = ("ort", "ort-cuda", "reference", "trt", "torch")


def parse(text: str) -> list:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in NAMES]
    if unknown or not names or len(set(names)) != len(names):
        raise AlignError(f"--runtimes: expected distinct names from {', '.join(NAMES)}, got {text!r}")
    return names


def unavailable(name: str, *, program=None) -> str | None:
    """Why `name` cannot run here (`program`: the --exported-program file), or None."""
    if name in ("ort", "ort-cuda"):
        try:
            import onnxruntime
        except ImportError as err:
            return f"ONNX Runtime unavailable: import onnxruntime failed ({err})"
        if name == "ort-cuda" and "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
            return ("ONNX Runtime CUDA unavailable: this onnxruntime has no CUDAExecutionProvider "
                    "(install onnxruntime-gpu on a machine with a GPU)")
        if name == "ort-cuda":
            from .trt import gpu_count

            if gpu_count() == 0:  # onnxruntime-gpu lists its CUDA EP on any machine
                return "ONNX Runtime CUDA unavailable: no GPU (cudaGetDeviceCount found none)"
        return None
    if name == "trt":
        from . import trt

        return trt.unavailable()
    if name == "torch":
        from . import torch_program

        return torch_program.unavailable(program)
    return None


def run(name: str, model, proto, feeds: dict, names: list, *, libraries=(),
        precision: str = "float64", program=None) -> dict:
    if name == "reference":
        return reference.run(model, proto, feeds, names, precision=precision)
    if name == "trt":
        from . import trt

        return trt.run(model, proto, feeds, names)
    if name == "torch":
        from . import torch_program

        return torch_program.run(model, program, feeds, names)
    providers = ["CUDAExecutionProvider", "CPUExecutionProvider"] if name == "ort-cuda" \
        else ["CPUExecutionProvider"]
    return run_ort(model, proto, feeds, names, libraries=libraries, providers=providers, label=name)


def ort_libraries(model, extra=()) -> list:
    """opforge_ort's library when the model has opforge nodes, plus the user's."""
    libraries = list(extra)
    if model.has_domain(spec.DOMAIN):
        try:
            import opforge_ort

            libraries.insert(0, opforge_ort.library_path())
        except (ImportError, FileNotFoundError) as err:
            raise AlignError(f"{model.path}: has {spec.DOMAIN} nodes: ONNX Runtime needs "
                             f"opforge_ort's library ({err}; pip install opforge-ort, or name the "
                             f"library with --library)") from None
    return libraries


def run_ort(model, proto, feeds, names, *, libraries, providers, label="ort") -> dict:
    import onnxruntime as ort

    ort.set_default_logger_severity(4)  # errors come back as exceptions, reported in one line
    options = ort.SessionOptions()
    options.log_severity_level = 4
    for library in libraries:
        try:
            options.register_custom_ops_library(str(library))
        except Exception as err:  # noqa: BLE001  ORT reports a bad library as a generic failure
            raise AlignError(f"{library}: {label}: the custom-op library does not load: "
                             f"{_first_line(err)}") from None
    wants_cuda = "CUDAExecutionProvider" in providers
    if wants_cuda and hasattr(ort, "preload_dlls"):
        ort.preload_dlls()  # the CUDA/cuDNN wheels of onnxruntime-gpu[cuda,cudnn], when no torch did
    try:
        session = ort.InferenceSession(proto.SerializeToString(), options, providers=providers)
        if wants_cuda and "CUDAExecutionProvider" not in session.get_providers():
            raise AlignError(f"{model.path}: {label}: the CUDA execution provider did not load (ONNX "
                             f"Runtime fell back to {', '.join(session.get_providers())}): install its "
                             "CUDA libraries, e.g. pip install 'onnxruntime-gpu[cuda,cudnn]'")
        outputs = session.run(names, feeds)
    except AlignError:
        raise
    except Exception as err:  # noqa: BLE001  ORT's refusal is the user's to read
        raise AlignError(f"{model.path}: {label}: {_first_line(err)}") from None
    return {n: np.asarray(v) for n, v in zip(names, outputs)}


def _first_line(err: Exception) -> str:
    lines = [line for line in str(err).splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__
