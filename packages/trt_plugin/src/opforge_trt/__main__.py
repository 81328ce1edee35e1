"""`python -m opforge_trt`: `path` prints the library path, `doctor` diagnoses loading problems."""
from __future__ import annotations

import argparse
import sys

from . import doctor, library_path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m opforge_trt", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("path", help="print the absolute path of libopforge_trt.so.1")
    check = commands.add_parser("doctor", help="check the plugin library: loadable, entry points, creators")
    check.add_argument("--library", help="plugin library to check (default: the installed one)")
    args = parser.parse_args(argv)
    if args.command == "path":
        print(library_path())
        return 0
    return doctor.main(args.library)


if __name__ == "__main__":
    sys.exit(main())
