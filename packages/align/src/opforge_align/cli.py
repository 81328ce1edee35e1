"""opforge-align: compare a model with custom ops across runtimes, tensor by tensor.

  opforge-align run MODEL.onnx [--inputs IN.npz] [--runtimes ort,reference] [--all-tensors]
                [--save-outputs OUT.npz] [--load-outputs GOLDEN.npz] [--json REPORT.json]
                [--report DIR] [--tolerance TENSOR=RTOL,ATOL ...] [--library LIB.so ...]
                [--exported-program PROGRAM.pt2] (the torch runtime)

Exit codes: 0 every compared tensor within tolerance, 1 a mismatch, 2 a usage error, an unreadable
model or input, or a runtime that cannot run it (one line naming the file), 3 an internal error (a
bug; one line, the traceback with OPFORGE_ALIGN_TRACEBACK=1).

The CI's alignment of opforge's own ops runs through the same tool: `layer2` (an export folder in
this venv's ONNX Runtime), `cross` (those results across ONNX Runtime releases), `export` (layer 1
and the export folder; needs torch and opforge_torch).
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import traceback
from pathlib import Path

from .errors import AlignError

OK, MISMATCH, USAGE, INTERNAL = 0, 1, 2, 3


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (argparse prints the whole usage)
        raise AlignError(f"{self.prog}: {message}")


def main(argv=None) -> int:
    command = None
    try:
        args = _parser().parse_args(argv)
        command = args.command
        return args.handler(args)
    except AlignError as err:
        print(f"opforge-align: {err}", file=sys.stderr)
        return USAGE
    except KeyboardInterrupt:
        return USAGE
    except Exception as err:  # noqa: BLE001  never a traceback for the user; the CI's commands keep it
        return _stray(err, traceback_too=command in HARNESS_COMMANDS
                      or bool(os.environ.get(TRACEBACK_ENV)))


HARNESS_COMMANDS = ("layer2", "cross", "export")
TRACEBACK_ENV = "OPFORGE_ALIGN_TRACEBACK"


def _stray(err: Exception, *, traceback_too: bool) -> int:
    """One line for an exception no check of the tool turned into an AlignError: exit 2 for the
    kinds that outside input raises (memory, files, archives, values, onnx/protobuf), 3 else."""
    if traceback_too:
        traceback.print_exc()
    detail = " ".join(str(err).split())[:300] or "no detail"
    if isinstance(err, MemoryError):
        print("opforge-align: out of memory: the inputs or the model's tensors are too large for "
              "this machine (smaller --dim sizes or inputs)", file=sys.stderr)
        return USAGE
    if _from_outside(err):
        print(f"opforge-align: {type(err).__name__}: {detail}", file=sys.stderr)
        return USAGE
    hint = "" if traceback_too else f"; {TRACEBACK_ENV}=1 shows where"
    print(f"opforge-align: internal error (a bug in opforge-align): {type(err).__name__}: "
          f"{detail}{hint}", file=sys.stderr)
    return INTERNAL


def _from_outside(err: Exception) -> bool:
    import zipfile
    import zlib

    outside = (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error)
    return isinstance(err, outside) or type(err).__module__.split(".")[0] in ("onnx", "google")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="opforge-align", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _run_parser(commands.add_parser("run", help="run a model (or a folder of models) in "
                                                "several runtimes and compare every tensor"))
    _harness_parsers(commands)
    return parser


def _run_parser(p) -> None:
    from .npz import DEFAULT_MAX_MIB

    p.add_argument("model", type=Path, help="an .onnx file, or a folder (an export folder with "
                                            "manifest.json: every model on each of its cases)")
    p.add_argument("--runtimes", default="ort,reference",
                   help="comma-separated: ort, ort-cuda, reference, trt, torch (default "
                        "ort,reference); the baseline is --load-outputs, else reference, else "
                        "the first")
    p.add_argument("--inputs", type=Path, help="an .npz holding one array per graph input")
    p.add_argument("--all-tensors", action="store_true",
                   help="compare every intermediate tensor, not only the graph outputs")
    p.add_argument("--save-outputs", type=Path, help="store the inputs and every compared tensor "
                                                     "of the first runtime (.npz by tensor name)")
    p.add_argument("--load-outputs", type=Path,
                   help="compare against the tensors of an .npz --save-outputs wrote")
    p.add_argument("--json", type=Path, help="write the report as JSON")
    p.add_argument("--report", type=Path, help="write report.md (+ error plots) into this folder")
    p.add_argument("--tolerance", action="append", default=[], metavar="TENSOR=RTOL,ATOL",
                   help="tolerance of the tensors matching TENSOR (a shell pattern); repeatable")
    p.add_argument("--library", action="append", default=[],
                   help="another ONNX Runtime custom-op library to register (repeatable)")
    p.add_argument("--exported-program", type=Path, metavar="PROGRAM.pt2",
                   help="the torch runtime's model: a torch.export program saved with "
                        "torch.export.save, fed the ONNX graph inputs in order; its outputs are "
                        "compared as the ONNX graph outputs (graph outputs only)")
    p.add_argument("--dim", action="append", default=[], metavar="NAME=SIZE",
                   help="size of a symbolic dimension for generated inputs (default 2)")
    p.add_argument("--seed", type=_non_negative_int, default=0, help="seed of the generated inputs")
    p.add_argument("--max-input-mib", type=_positive_number, default=DEFAULT_MAX_MIB,
                   metavar="MIB",
                   help="the most memory the inputs may take together, and any one array of "
                        f"--load-outputs or an export folder's case (default "
                        f"{DEFAULT_MAX_MIB}); checked before reading or generating them")
    p.add_argument("--reference-precision", choices=("float64", "model"), default="float64",
                   help="the reference run in float64 (default) or in the model's own dtypes")
    p.add_argument("--match", default="*", metavar="GLOB",
                   help="a folder: only the runs whose label (model stem, or export entry.form.case) "
                        "matches GLOB")
    p.add_argument("--skip-unavailable", action="store_true",
                   help="record a runtime that cannot run here as skipped instead of exit 2")
    p.set_defaults(handler=_run)


def _non_negative_int(text: str) -> int:
    if not text.strip().isascii() or not text.strip().isdigit():
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}")
    return int(text)


def _positive_number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text!r}")
    return min(value, 2.0 ** 60)  # beyond any machine; keeps the byte count an int


def _run(args) -> int:
    from . import align, folder, report, runtimes, tolerances
    from .inputs import parse_dims
    from .npz import MIB

    options = align.Options(
        runtimes=runtimes.parse(args.runtimes), inputs=args.inputs, all_tensors=args.all_tensors,
        save_outputs=args.save_outputs, load_outputs=args.load_outputs,
        overrides=[tolerances.Override.parse(t) for t in args.tolerance], libraries=args.library,
        dims=parse_dims(args.dim), seed=args.seed, precision=args.reference_precision,
        skip_unavailable=args.skip_unavailable, exported_program=args.exported_program,
        max_input_bytes=int(args.max_input_mib * MIB))
    if args.model.is_dir() and args.exported_program:
        raise AlignError(f"--exported-program: expected one MODEL.onnx to pair it with, got the "
                         f"folder {args.model}")
    if args.model.is_dir():
        return folder.run(args.model, options, json_path=args.json, report_dir=args.report,
                          match=args.match)
    result = align.run(args.model, options)
    if args.json:
        report.write_json(result, args.json)
    if args.report:
        report.write_markdown(result, args.report)
    print(report.summary(result))
    return OK if result.ok else MISMATCH


# --------------------------------------------------------------------- the CI's alignment harness

def _harness_parsers(commands) -> None:
    from .harness.stage import fault_arg

    p = commands.add_parser("layer2", help="CI: run an export folder in this venv's ONNX Runtime "
                                           "and the reference evaluator (layer 2)")
    p.add_argument("--models", type=Path, required=True, help="`export`'s --out folder")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--library", help="libopforge_ort.so.1 (default: opforge_ort.library_path())")
    p.add_argument("--allow-missing-plugin", action="store_true",
                   help="record the custom-domain forms as skipped instead of failing")
    p.add_argument("--no-refeval", action="store_true", help="skip onnx's reference evaluator")
    p.add_argument("--ir-version", default="",
                   help="run copies saved with at most this IR version (0/empty: as exported)")
    fault_arg(p)
    p.set_defaults(handler=_layer2)

    p = commands.add_parser("cross", help="CI: compare layer2 results of several ONNX Runtime "
                                          "releases (numpy only)")
    p.add_argument("--results", nargs="+", required=True,
                   help=f"folders; one argument may also hold several, '{os.pathsep}'-separated")
    p.add_argument("--out", type=Path, required=True)
    p.set_defaults(handler=_cross)

    p = commands.add_parser("export", help="CI: layer 1 and the export folder (torch venv)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--opset", type=int, default=18)
    p.add_argument("--ir-version", default="", help="write this IR version (ORT < 1.18: 8)")
    p.add_argument("--no-layer1", action="store_true")
    p.add_argument("--jobs", type=int, default=0,
                   help="export processes (default: one per usable CPU)")
    fault_arg(p)
    p.set_defaults(handler=_export)


def _layer2(args) -> int:
    import warnings

    from .harness import ort_check
    from .harness.stage import finish

    warnings.filterwarnings("ignore")  # the reference evaluator's overflow warnings on edge cases
    library = ort_check.library_path(args.library)
    if not library and not args.allow_missing_plugin:
        raise AlignError("layer2: opforge_ort: expected an installed package or --library PATH, "
                         "got none (pip install ./packages/ort_plugin)")
    ir_version = int(args.ir_version) if args.ir_version.strip() not in ("", "0", "None") else None
    results = ort_check.check_folder(args.models, args.out, library=library,
                                     fault=args.inject_fault, refeval=not args.no_refeval,
                                     ir_version=ir_version)
    version = results.context["onnxruntime"]
    return finish(results, out=args.out, name="ort_results",
                  title=f"opforge alignment: layer 2, ONNX Runtime {version}",
                  extra_numbers={"align.onnxruntime": version})


def _cross(args) -> int:
    from .harness import cross
    from .harness.stage import finish

    folders = [Path(p) for arg in args.results for p in arg.split(os.pathsep) if p]
    return finish(cross.compare(folders), out=args.out, name="cross_version",
                  title="opforge alignment: across ONNX Runtime versions")


def _export(args) -> int:
    from .harness.export_stage import main as export_main

    return export_main(args)
