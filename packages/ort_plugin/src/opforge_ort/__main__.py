"""`python -m opforge_ort`: `path` prints the library path, `doctor MODEL.onnx` diagnoses loading."""
from __future__ import annotations

import argparse
import sys

from . import doctor, library_path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m opforge_ort", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("path", help="print the absolute path of libopforge_ort.so.1")
    check = commands.add_parser("doctor", help="load MODEL with the plugin; on failure, say why and how to fix it")
    check.add_argument("model", help="ONNX model file using the opforge domain")
    check.add_argument("--library", help="custom-op library to check (default: the installed one)")
    check.add_argument("--provider", default="CPUExecutionProvider", help="execution provider to load with")
    args = parser.parse_args(argv)
    if args.command == "path":
        print(library_path())
        return 0
    return doctor.main(args.model, library=args.library, provider=args.provider)


if __name__ == "__main__":
    sys.exit(main())
