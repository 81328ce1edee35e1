"""Runtime side of layer 2 (an ORT venv: onnxruntime, numpy, onnx, opforge_ort).

  python tests/alignment/check_ort.py --models EXPORT_DIR --out DIR [--library PATH]

Runs every model of EXPORT_DIR (written by export.py) in ONNX Runtime with the opforge_ort library
and in onnx's reference evaluator. Writes DIR/ort_results.{json,md}, DIR/outputs/*.npz (input of
compare_versions.py) and the stage result. Exit 1 if a check failed, 2 if opforge_ort is missing.
"""
from __future__ import annotations

import argparse
import warnings
from pathlib import Path

from opforge_align import ort_check
from opforge_align.stage import exit_with, fault_arg, finish


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, required=True, help="export.py's --out folder")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--library", help="libopforge_ort.so.1 (default: opforge_ort.library_path())")
    parser.add_argument("--allow-missing-plugin", action="store_true",
                        help="record the custom-domain forms as skipped instead of failing")
    parser.add_argument("--no-refeval", action="store_true", help="skip onnx's reference evaluator")
    parser.add_argument("--ir-version", default="",
                        help="run copies saved with at most this IR version (0/empty: as exported)")
    fault_arg(parser)
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")  # the reference evaluator's overflow warnings on edge cases
    library = ort_check.library_path(args.library)
    if not library and not args.allow_missing_plugin:
        print("check_ort: opforge_ort: expected an installed package or --library PATH, got none "
              "(pip install ./packages/ort_plugin)")
        return 2
    ir_version = int(args.ir_version) if args.ir_version.strip() not in ("", "0", "None") else None
    results = ort_check.check_folder(args.models, args.out, library=library,
                                     fault=args.inject_fault, refeval=not args.no_refeval,
                                     ir_version=ir_version)
    version = results.context["onnxruntime"]
    return finish(results, out=args.out, name="ort_results",
                  title=f"opforge alignment: layer 2, ONNX Runtime {version}",
                  extra_numbers={"align.onnxruntime": version})


if __name__ == "__main__":
    exit_with(main())
