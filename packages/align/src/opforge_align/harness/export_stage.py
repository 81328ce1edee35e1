"""Torch side of the CI alignment (torch venv): layer 1, then the layer-2 export folder.

Writes OUT/layer1.{json,md}, OUT/manifest.json, OUT/models/*.onnx, OUT/data/*.npz and the stage
result (layer-1 numbers) to $OPFORGE_STAGE_RESULT. Exit 1 if a check or an export failed."""
from __future__ import annotations


def main(args) -> int:
    from . import export, layer1
    from .checks import Results, failed
    from .stage import finish

    export.quiet_exporters()
    results = Results() if args.no_layer1 else layer1.run(fault=args.inject_fault)
    ir_version = args.ir_version if args.ir_version.lower() not in ("", "0", "none", "null") else None
    manifest = export.export_all(args.out, opset=args.opset,
                                 ir_version=int(ir_version) if ir_version else None,
                                 jobs=args.jobs or export.default_jobs())
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

