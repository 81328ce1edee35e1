import subprocess
import sys

import pytest

pytest.importorskip("onnxruntime", reason="the ort runtime needs onnxruntime")


@pytest.fixture(scope="session")
def ort_library():
    try:
        import opforge_ort

        return opforge_ort.library_path()
    except (ImportError, FileNotFoundError) as err:
        pytest.skip(f"opforge_ort is not installed ({err})")


@pytest.fixture
def align():
    """Runs `python -m opforge_align ARGS` (the console script's code) in a child process."""
    def run(*args, cwd=None):
        return subprocess.run([sys.executable, "-m", "opforge_align", *map(str, args)],
                              capture_output=True, text=True, cwd=cwd)
    return run
