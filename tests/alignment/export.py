"""Torch side of the alignment (torch venv): layer 1, then the layer-2 export folder.

  python tests/alignment/export.py --out DIR [--opset 18] [--ir-version 8]

Writes DIR/layer1.{json,md}, DIR/manifest.json, DIR/models/*.onnx, DIR/data/*.npz; the stage
result (layer-1 numbers) to $OPFORGE_STAGE_RESULT. Exit 1 if a check or an export failed.
"""
from __future__ import annotations

import argparse
import logging
import warnings
from pathlib import Path

from opforge_align import export, layer1
from opforge_align.checks import Results, failed
from opforge_align.stage import exit_with, fault_arg, finish


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--opset", type=int, default=18)
    parser.add_argument("--ir-version", default="", help="write this IR version (ORT < 1.18: 8)")
    parser.add_argument("--no-layer1", action="store_true")
    fault_arg(parser)
    args = parser.parse_args(argv)
    quiet_exporters()
    results = Results() if args.no_layer1 else layer1.run(fault=args.inject_fault)
    ir_version = args.ir_version if args.ir_version.lower() not in ("", "0", "none", "null") else None
    manifest = export.export_all(args.out, opset=args.opset,
                                 ir_version=int(ir_version) if ir_version else None)
    for entry in manifest["entries"]:
        for form, model in entry["models"].items():
            if isinstance(model, dict) and "error" in model:
                results.add(failed(model["error"], layer="2", op=entry["op"], dtype=entry["dtype"],
                                   subject=f"export.{form}", against="torch", case=entry["id"],
                                   rule="exports"))
    models = sum(isinstance(m, str) for e in manifest["entries"] for m in e["models"].values())
    results.context.update({"opset": args.opset, "ir_version": ir_version or "default",
                            "exported models": models})
    return finish(results, out=args.out, name="layer1", title="opforge alignment: layer 1 and export",
                  extra_artifacts=[args.out / "manifest.json"],
                  extra_numbers={"align.export.models": models})


def quiet_exporters() -> None:
    """The exporters' progress lines and deprecation warnings would bury the report."""
    warnings.filterwarnings("ignore")
    for name in ("torch.onnx", "torch._dynamo", "torch.export", "onnxscript"):
        logging.getLogger(name).setLevel(logging.ERROR)


if __name__ == "__main__":
    exit_with(main())
