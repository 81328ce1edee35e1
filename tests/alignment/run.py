"""All alignment layers in one go (a torch venv with onnxruntime and opforge_ort installed).

  python tests/alignment/run.py --out DIR [--layers 1,2,cross,3] [--opset 18] [--ir-version 8]
                                [--ort-python OTHER_VENV/bin/python ...]

Each step runs as its own process (as the matrix stages do), through opforge-align from this
source tree: layer 1 + export, then `layer2` with this python and every --ort-python (one ONNX
Runtime release each); cross compares those runs (needs >= 2 pythons in all); 3 runs
`run EXPORT --runtimes ort,trt` (recorded as not run where there is no GPU/TensorRT). Writes
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

import _package

from opforge_align.harness.checks import write_stage_result
from opforge_align.harness.stage import exit_with, fault_arg

HERE = Path(__file__).resolve().parent
# The tool's entry as a file: runs from this tree in any venv, installed or not.
ALIGN = str(_package.SOURCES / "opforge_align" / "__main__.py")


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
            codes.append(_run([python, ALIGN, "layer2", "--models", str(export_dir),
                               "--out", str(ort_dir), "--inject-fault", args.inject_fault],
                              ort_dir / "stage.json", prefix=f"align.{ort_dir.name}"))
            ort_dirs.append(ort_dir)
            reports.append(ort_dir / "ort_results.md")
    if "3" in layers:  # exits 2 where TensorRT cannot run: "not run", neither pass nor failure
        trt = out / "trt"
        code, stage_json, prefix = _run([sys.executable, ALIGN, "run", str(export_dir), "--runtimes",
                                         "ort,trt", "--all-tensors", "--json", str(trt / "trt.json"),
                                         "--report", str(trt)], trt / "stage.json",
                                        stderr=trt / "not_run.txt")
        codes.append((0 if code == 2 else code, stage_json, prefix))
    if "cross" in layers:
        codes.append(_run([sys.executable, ALIGN, "cross", "--results",
                           *map(str, ort_dirs), "--out", str(out / "cross")],
                          out / "cross" / "stage.json"))
        reports.append(out / "cross" / "cross_version.md")
    return _combine(out, reports, codes)


def _ort_version(python: str) -> str:
    return subprocess.run([python, "-c", "import onnxruntime; print(onnxruntime.__version__)"],
                          check=True, capture_output=True, text=True).stdout.strip()


def _run(command: list, stage_json: Path, prefix: str = "align", stderr: Path | None = None) -> tuple:
    """Runs one step with its own stage result; its numbers get `prefix` instead of "align"
    (one ORT run's names would overwrite another's). `stderr`: also kept in that file."""
    stage_json.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OPFORGE_STAGE_RESULT": str(stage_json)}
    proc = subprocess.run(command, env=env, stderr=subprocess.PIPE if stderr else None, text=True)
    if stderr:
        sys.stderr.write(proc.stderr)
        stderr.write_text(proc.stderr)
    return proc.returncode, stage_json, prefix


def _combine(out: Path, reports: list, codes: list) -> int:
    numbers, artifacts = {}, []
    for _, stage_json, prefix in codes:
        if stage_json.exists():
            data = json.loads(stage_json.read_text())
            numbers.update({prefix + k[len("align"):] if k.startswith("align.") else k: v
                            for k, v in data.get("numbers", {}).items()})
            artifacts += data.get("artifacts", [])
    text = "\n".join(r.read_text() for r in reports if r.exists())
    not_run = out / "trt" / "not_run.txt"
    if (out / "trt" / "report.md").exists() or not_run.exists():
        why = not_run.read_text().strip() if not_run.exists() else ""
        text += f"\n# layer 3 (ORT <-> TensorRT)\n\n{why or 'see trt/trt.json'}\n"
    (out / "alignment.md").write_text(text)
    write_stage_result(numbers, [str(out / "alignment.md"), *artifacts])
    worst = max((code for code, _, _ in codes), default=0)
    print(f"alignment: {'FAILED' if worst else 'passed'}; report {out / 'alignment.md'}")
    return 1 if worst else 0


if __name__ == "__main__":
    exit_with(main())
