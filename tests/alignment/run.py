"""All alignment layers in one go (a torch venv with onnxruntime and opforge_ort installed).

  python tests/alignment/run.py --out DIR [--layers 1,2,cross,3] [--opset 18] [--ir-version 8]
                                [--ort-python OTHER_VENV/bin/python ...]

Each step runs as its own script (as the matrix stages do): layer 1 + export, then layer 2 runs check_ort.py with this python and every
--ort-python (one ONNX Runtime release each); cross compares those runs (needs >= 2 pythons in
all); 3 runs check_trt.py (recorded as not run where there is no GPU/TensorRT). Writes
DIR/alignment.md (every table), DIR/{export,ort-<version>,cross}/ and the stage
result with all numbers. Exit 1 if any check failed.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from opforge_align.checks import write_stage_result
from opforge_align.stage import exit_with, fault_arg

HERE = Path(__file__).resolve().parent


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("build/alignment"))
    parser.add_argument("--layers", default="1,2,cross")
    parser.add_argument("--opset", default="18")
    parser.add_argument("--ir-version", default="")
    parser.add_argument("--ort-python", action="append", default=[],
                        help="python of another venv with onnxruntime + opforge_ort (repeatable)")
    fault_arg(parser)
    args = parser.parse_args(argv)
    layers = set(args.layers.split(","))
    out = args.out.resolve()
    export_dir, codes, reports = out / "export", [], []
    step = [sys.executable, str(HERE / "export.py"), "--out", str(export_dir), "--opset", args.opset,
            "--ir-version", args.ir_version, "--inject-fault", args.inject_fault]
    codes.append(_run(step + ([] if "1" in layers else ["--no-layer1"]), out / "export.json"))
    reports.append(export_dir / "layer1.md")
    ort_dirs = []
    if layers & {"2", "cross"}:
        for python in [sys.executable, *args.ort_python]:
            ort_dir = out / f"ort-{_ort_version(python)}"
            codes.append(_run([python, str(HERE / "check_ort.py"), "--models", str(export_dir),
                               "--out", str(ort_dir), "--inject-fault", args.inject_fault],
                              ort_dir / "stage.json", prefix=f"align.{ort_dir.name}"))
            ort_dirs.append(ort_dir)
            reports.append(ort_dir / "ort_results.md")
    if "3" in layers:  # exits 3 where it cannot run: "not run", neither pass nor failure
        code, stage_json, prefix = _run([sys.executable, str(HERE / "check_trt.py"), "--models",
                                         str(export_dir), "--out", str(out / "trt")],
                                        out / "trt" / "stage.json")
        codes.append((0 if code == 3 else code, stage_json, prefix))
    if "cross" in layers:
        codes.append(_run([sys.executable, str(HERE / "compare_versions.py"), "--results",
                           *map(str, ort_dirs), "--out", str(out / "cross")],
                          out / "cross" / "stage.json"))
        reports.append(out / "cross" / "cross_version.md")
    return _combine(out, reports, codes)


def _ort_version(python: str) -> str:
    return subprocess.run([python, "-c", "import onnxruntime; print(onnxruntime.__version__)"],
                          check=True, capture_output=True, text=True).stdout.strip()


def _run(command: list, stage_json: Path, prefix: str = "align") -> tuple:
    """Runs one step with its own stage result; its numbers get `prefix` instead of "align"
    (one ORT run's names would overwrite another's)."""
    stage_json.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OPFORGE_STAGE_RESULT": str(stage_json)}
    code = subprocess.run(command, env=env).returncode
    return code, stage_json, prefix


def _combine(out: Path, reports: list, codes: list) -> int:
    numbers, artifacts = {}, []
    for _, stage_json, prefix in codes:
        if stage_json.exists():
            data = json.loads(stage_json.read_text())
            numbers.update({prefix + k[len("align"):] if k.startswith("align.") else k: v
                            for k, v in data.get("numbers", {}).items()})
            artifacts += data.get("artifacts", [])
    text = "\n".join(r.read_text() for r in reports if r.exists())
    trt = out / "trt" / "stage.json"
    if trt.exists():
        text += f"\n# layer 3 (ORT <-> TensorRT)\n\nnot run: {json.loads(trt.read_text())['skipped']}\n"
    (out / "alignment.md").write_text(text)
    write_stage_result(numbers, [str(out / "alignment.md"), *artifacts])
    worst = max((code for code, _, _ in codes), default=0)
    print(f"alignment: {'FAILED' if worst else 'passed'}; report {out / 'alignment.md'}")
    return 1 if worst else 0


if __name__ == "__main__":
    exit_with(main())
