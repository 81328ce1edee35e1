"""The `torch` runtime: a torch.export program (the .pt2 file `torch.export.save` writes) run on
the ONNX model's inputs, its outputs named after the ONNX graph outputs.

The program is fed the ONNX graph inputs in their order and must return as many tensors as the
graph has outputs, each of the declared shape: anything else means the two files are not the same
model, a usage error naming both. `opforge_torch` is imported first when the program calls
`torch.ops.opforge.*` (torch cannot load it otherwise). Intermediate torch tensors have no ONNX
names, so with this runtime only the graph outputs are compared (align.py says so in the report).
"""
from __future__ import annotations

import contextlib
import logging
import zipfile
from pathlib import Path

import numpy as np

import opforge_spec as spec

from .errors import AlignError

OPFORGE_CALL = f"torch.ops.{spec.DOMAIN}.".encode()


def unavailable(program: Path | None) -> str | None:
    """Why the torch runtime cannot run here, or None."""
    if program is None:
        return ("torch runtime unavailable: it runs a torch.export program: give "
                "--exported-program PROGRAM.pt2 (the file torch.export.save writes)")
    try:
        import torch  # noqa: F401
    except ImportError as err:
        return f"torch unavailable: import torch failed ({err})"
    return None


def run(model, program_path: Path, feeds: dict, names: list) -> dict:
    """{ONNX graph output name: array} of the program at `program_path` on `feeds`."""
    program = load(program_path)
    arguments = _arguments(model, program_path, program, feeds)
    try:
        returned = program.module()(*arguments)
    except Exception as err:  # noqa: BLE001  a guard or kernel refusing the inputs: the user's
        raise AlignError(f"{program_path}: torch: the program refuses the inputs of {model.path} "
                         f"({_shapes(feeds)}): {_first_line(err)}") from None
    outputs = _named_outputs(model, program_path, _leaves(returned))
    return {name: outputs[name] for name in names if name in outputs}


def load(path: Path):
    """The ExportedProgram at `path`, or AlignError naming the file and what is wrong with it."""
    import torch

    if not path.is_file():
        raise AlignError(f"{path}: no such file (--exported-program)")
    if _calls_opforge(path):
        _import_opforge_torch(path)
    with _torch_export_log() as logged:
        try:
            return torch.export.load(str(path))
        except Exception as err:  # noqa: BLE001  a corrupt archive surfaces as many error types
            # torch logs the real cause, then raises a vague "check the warnings above"
            cause = _root_cause(logged[-1] if logged else err)
            raise AlignError(f"{path}: not a loadable torch.export program "
                             f"({type(cause).__name__}: {_first_sentence(cause)})") from None


def _calls_opforge(path: Path) -> bool:
    """Whether the archive's serialized graphs call torch.ops.opforge.* (read before loading:
    torch cannot deserialize a call to an op nobody registered)."""
    try:
        with zipfile.ZipFile(path) as archive:
            return any(OPFORGE_CALL in archive.read(member) for member in archive.namelist()
                       if "/models/" in member and member.endswith(".json"))
    except (zipfile.BadZipFile, OSError, ValueError):
        return False  # not an archive: torch.export.load says so


def _import_opforge_torch(path: Path) -> None:
    try:
        import opforge_torch  # noqa: F401  registers torch.ops.opforge.*
    except ImportError as err:
        raise AlignError(f"{path}: calls torch.ops.{spec.DOMAIN}.*: needs the opforge_torch "
                         f"package (pip install --no-build-isolation ./packages/torch_ext; "
                         f"import failed: {err})") from None


@contextlib.contextmanager
def _torch_export_log():
    """Keeps torch.export's logged tracebacks off stderr (the CLI answers in one line) and
    collects the exceptions they carry."""
    logger = logging.getLogger("torch.export")
    caught = []

    class Collect(logging.Handler):
        def emit(self, record):
            if record.exc_info and record.exc_info[1] is not None:
                caught.append(record.exc_info[1])

    handler, saved = Collect(), (logger.handlers[:], logger.propagate)
    logger.handlers[:] = [handler]
    logger.propagate = False
    try:
        yield caught
    finally:
        logger.handlers[:], logger.propagate = saved


def _arguments(model, program_path: Path, program, feeds: dict) -> list:
    """The ONNX graph inputs, in order, as torch tensors."""
    takes = list(program.graph_signature.user_inputs)
    given = [i.name for i in model.inputs]
    if len(takes) != len(given):
        raise AlignError(f"{program_path}: takes {len(takes)} input(s) {takes}, but "
                         f"{model.path} has {len(given)} graph input(s) {given}: expected the "
                         "same model in both files")
    return [_to_torch(feeds[name]) for name in given]


def _named_outputs(model, program_path: Path, tensors: list) -> dict:
    """The program's outputs under the ONNX graph output names, after checking count and shapes."""
    declared = list(model.graph.output)
    if len(tensors) != len(declared):
        raise AlignError(f"{program_path}: returns {len(tensors)} output(s), but {model.path} has "
                         f"{len(declared)} graph output(s) {[o.name for o in declared]}: expected "
                         "the same model in both files")
    out = {}
    for index, (info, tensor) in enumerate(zip(declared, tensors)):
        array = _to_numpy(tensor)
        expected = _declared_shape(info)
        if expected is not None and not _fits(array.shape, expected):
            shown = ["?" if d is None else d for d in expected]
            raise AlignError(f"{program_path}: output {index} has shape {list(array.shape)}, but "
                             f"{model.path} declares {info.name!r} as {shown}: expected the same "
                             "model in both files")
        out[info.name] = array
    return out


def _leaves(value) -> list:
    """The tensors of a program's return value, in order (a tensor, or tuples/lists/dicts)."""
    if isinstance(value, (list, tuple)):
        return [leaf for item in value for leaf in _leaves(item)]
    if isinstance(value, dict):
        return [leaf for item in value.values() for leaf in _leaves(item)]
    return [value]


def _declared_shape(info) -> list | None:
    tensor_type = info.type.tensor_type
    if not tensor_type.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else None for d in tensor_type.shape.dim]


def _fits(shape: tuple, declared: list) -> bool:
    return len(shape) == len(declared) and all(d is None or d == s for d, s in zip(declared, shape))


def _to_torch(array: np.ndarray):
    import torch

    array = np.array(array, copy=True)  # torch.from_numpy shares memory; the feeds are reused
    if array.dtype.name == "bfloat16":  # numpy's bfloat16 (ml_dtypes) is unknown to torch
        return torch.from_numpy(array.view(np.uint16)).view(torch.bfloat16)
    return torch.from_numpy(array)


def _to_numpy(value) -> np.ndarray:
    import torch

    if not isinstance(value, torch.Tensor):
        return np.asarray(value)
    value = value.detach().cpu()
    if value.dtype == torch.bfloat16:
        import ml_dtypes

        return value.view(torch.uint16).numpy().view(ml_dtypes.bfloat16)
    if value.dtype == torch.float8_e4m3fn:  # numpy has no float8 either: the same bits
        import ml_dtypes

        return value.view(torch.uint8).numpy().view(ml_dtypes.float8_e4m3fn)
    return value.numpy()


def _shapes(feeds: dict) -> str:
    return ", ".join(f"{name} {array.dtype}{list(array.shape)}" for name, array in feeds.items())


def _root_cause(err: BaseException) -> BaseException:
    while (parent := err.__cause__ or err.__context__) is not None:
        err = parent
    return err


def _first_sentence(err: BaseException) -> str:
    """torch's archive errors run on for several sentences on one line: the first says it."""
    line = _first_line(err)
    head, dot, _ = line.partition(". ")
    return (head + dot.strip())[:300]


def _first_line(err: BaseException) -> str:
    lines = [line for line in str(err).splitlines() if line.strip()]
    return lines[0].strip() if lines else type(err).__name__
