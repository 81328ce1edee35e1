"""Layer 3: ONNX Runtime <-> TensorRT (GPU cells with a TensorRT runtime).

  python tests/alignment/check_trt.py --models EXPORT_DIR --out DIR

Not implemented beyond detection yet: it runs only where a GPU and TensorRT exist, and none can be
had on the build hosts (no TensorRT runtime on PyPI without NVIDIA's index). It reports why it did
not run - in the stage result as {"skipped": reason} - and exits 3, so that it is never taken for a
pass.
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from opforge_align.stage import exit_with


def why_not() -> str:
    try:
        import tensorrt  # noqa: F401
    except (ImportError, OSError) as err:  # OSError: libnvinfer missing
        return f"no TensorRT runtime: import tensorrt failed ({type(err).__name__}: {err})"
    try:
        import torch

        if not torch.cuda.is_available():
            return "no GPU: torch.cuda.is_available() is False"
    except ImportError:
        pass
    return "layer 3 comparison not implemented yet (TensorRT engine build + run of the export folder)"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    reason = why_not()
    args.out.mkdir(parents=True, exist_ok=True)
    payload = {"skipped": reason, "numbers": {"align.l3.skipped": reason}, "artifacts": []}
    if os.environ.get("OPFORGE_STAGE_RESULT"):
        Path(os.environ["OPFORGE_STAGE_RESULT"]).write_text(json.dumps(payload, indent=1))
    print(f"layer 3 (ORT <-> TensorRT) not run: {reason}")
    return 3


if __name__ == "__main__":
    exit_with(main())
