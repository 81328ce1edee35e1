"""Runs one Python fuzz target under atheris (libFuzzer inside, same flags as driver.cpp):

    python -m fuzz.pytarget fuzz/targets/NAME/target.py [-flag=value ...] [DIR ... | FILE ...]

The target's imports are instrumented, so the code under test feeds coverage back."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path


def load_target(path: Path):
    import atheris

    # Imported through the import system (not exec'd from a spec) so that atheris instruments
    # the target's own code as well as everything it imports.
    sys.path.insert(0, str(path.resolve().parent))
    with atheris.instrument_imports():
        module = importlib.import_module(path.stem)
    if not callable(getattr(module, "test_one_input", None)):
        raise SystemExit(f"{path}: defines no test_one_input(data: bytes)")
    return module


def main() -> None:
    import atheris

    if len(sys.argv) < 2 or not Path(sys.argv[1]).is_file():
        raise SystemExit(__doc__)
    module = load_target(Path(sys.argv[1]))
    atheris.Setup([sys.argv[0], *sys.argv[2:]], module.test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
