"""The numbers of opforge_torch's export table (opforge_torch/export_table.json), for the ONNX
Runtime this process imports: per op, at which opsets its standard ONNX op runs here with the op's
values (a one-node model at each opset 18..28), whether the opforge plugin loads, and the median
time of each form (opforge node, standard op, decomposed graph) on one thread.

    python -m opforge_bench.export_forms [--write PATH] [--rows 4096] [--cols 4096] [--repeat 15]

run from bench/ (PYTHONPATH=bench elsewhere), once per ONNX Runtime version (another version:
its wheel first on PYTHONPATH). --write merges this version's row into the table; without it
the row is printed."""
from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

import opforge_spec

from .ort_variants import GraphEmitter, decomposed_model, library, opforge_model
from .timing import host_info, measure_interleaved


def _load_export_table():
    """opforge_torch's export_table module, loaded on its own (it imports only opforge_spec): the
    venv of an old ONNX Runtime (1.17.3's) has no torch to import the opforge_torch package with."""
    found = importlib.util.find_spec("opforge_torch")
    if found is None or not found.submodule_search_locations:
        raise SystemExit("opforge_bench.export_forms: needs opforge_torch's sources on the path")
    path = Path(next(iter(found.submodule_search_locations))) / "export_table.py"
    module_spec = importlib.util.spec_from_file_location("opforge_torch_export_table", path)
    assert module_spec is not None and module_spec.loader is not None  # a .py file
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_spec.name] = module  # dataclasses look their module up there
    module_spec.loader.exec_module(module)
    return module


export_table = _load_export_table()
OPSETS = range(18, 29)
IR_VERSION = 10  # what torch's dynamo exporter writes, whatever the opset
SEED = 20261206


def standard_model(op: str, opset: int, cols: int) -> bytes:
    """The op's standard form (export_table.write_standard) in a model of `opset`: X (and R)
    inputs of [rows, split * cols], W an initializer, as ort_variants' models."""
    spec = opforge_spec.OPS[op]
    e = GraphEmitter()
    returned = export_table.write_standard(e, op, *spec.inputs, *spec.defaults().values())
    for tensor, name in zip(returned if len(spec.outputs) > 1 else (returned,), spec.outputs):
        e.rename(tensor, name)
    weight = [_weight(cols)] if "W" in spec.inputs else []
    shape = ["n"] if spec.layout == "elementwise" else ["rows", spec.split * cols]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape)
              for n in spec.inputs if n != "W"]
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in spec.outputs]
    graph = helper.make_graph(e.nodes, "standard", inputs, outputs, [*weight, *e.initializers])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = IR_VERSION
    return model.SerializeToString()


def _weight(cols: int):
    # ort_variants' weight (its models' W): the same values, so every form computes the same op
    return onnx.numpy_helper.from_array((np.random.default_rng(0).random(cols) + 0.5)
                                        .astype(np.float32), "W")


def _session(model: bytes, lib: str | None = None):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if lib:
        options.register_custom_ops_library(lib)
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def _feeds(op: str, rows: int, cols: int) -> dict:
    """X (and R) as ort_variants' models take them: an elementwise op's flat, rows otherwise."""
    spec = opforge_spec.OPS[op]
    shape = (rows * cols,) if spec.layout == "elementwise" else (rows, spec.split * cols)
    rng = np.random.default_rng(SEED)
    return {n: rng.standard_normal(shape).astype(np.float32) for n in spec.inputs if n != "W"}


def _expected(op: str, feeds: dict, cols: int) -> list:
    spec = opforge_spec.OPS[op]
    w = onnx.numpy_helper.to_array(_weight(cols))
    arrays = [w if n == "W" else feeds[n] for n in spec.inputs]
    result = spec.reference(*arrays)
    return list(result) if len(spec.outputs) > 1 else [result]


def runs_correctly(op: str, model: bytes, lib: str | None = None) -> bool:
    """Whether this ORT loads the model and gives the op's values (the spec's float32 bars)."""
    feeds, cols = _feeds(op, 3, 8), 8
    try:
        got = _session(model, lib).run(None, feeds)
    except Exception:  # noqa: BLE001  not implemented (or not loadable) here: that is the answer
        return False
    rtol, atol = opforge_spec.OPS[op].tolerance("float32")
    return all(np.allclose(g, e, rtol=rtol, atol=atol) for g, e in zip(got, _expected(op, feeds, cols)))


def standard_opsets(op: str) -> list:
    form = export_table.STANDARD_FORMS.get(op)
    if form is None:
        return []
    return [o for o in OPSETS if o >= form.opset and runs_correctly(op, standard_model(op, o, 8))]


def plugin_loads(lib: str | None) -> bool:
    return bool(lib) and runs_correctly("Swish", opforge_model("Swish", 8), lib)


def _runner(session, feeds: dict):
    return lambda: session.run(None, feeds)


def time_forms(op: str, opsets: list, lib: str | None, *, rows: int, cols: int,
               repeat: int) -> dict:
    """{form: median ms} of the forms that run here, timed round-robin on the same inputs."""
    models = {"decomposed": decomposed_model(op, cols)}
    if lib:
        models["opforge"] = opforge_model(op, cols)
    if opsets:
        models["standard"] = standard_model(op, opsets[0], cols)
    feeds = _feeds(op, rows, cols)
    fns = {form: _runner(_session(model, lib if form == "opforge" else None), feeds)
           for form, model in models.items()}
    timings = measure_interleaved(fns, repeat=repeat, warmup=2)
    return {form: round(t.median_s * 1e3, 3) for form, t in timings.items()}


def measure_row(*, rows: int, cols: int, repeat: int, log=print) -> dict:
    lib = library()
    plugin = plugin_loads(lib)
    row: dict = {"plugin": plugin, "standard_opsets": {}, "median_ms": {}}
    for op in opforge_spec.OPS:
        opsets = standard_opsets(op)
        if opsets:
            row["standard_opsets"][op] = opsets
        try:
            row["median_ms"][op] = time_forms(op, opsets, lib if plugin else None,
                                              rows=rows, cols=cols, repeat=repeat)
        except Exception as err:  # noqa: BLE001  a form this bench cannot build: the row says so
            row.setdefault("not_timed", {})[op] = f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
            log(f"onnxruntime {ort.__version__} {op}: not timed: {row['not_timed'][op]}")
            continue
        log(f"onnxruntime {ort.__version__} {op}: standard at opsets {opsets or 'none'}; "
            f"median ms {row['median_ms'][op]}")
    host = host_info()
    row["measured"] = {"date": datetime.date.today().isoformat(), "cpu": host.get("cpu"),
                       "loadavg_1m_at_start": round(host["loadavg_1m_at_start"], 2),
                       "repeat": repeat}
    return row


def write_row(path: Path, version: str, row: dict, *, rows: int, cols: int) -> None:
    data = json.loads(path.read_text())
    data["runtimes"]["onnxruntime"][version] = row
    data["measurement"]["onnxruntime"] = (
        f"bench/opforge_bench/export_forms.py: X float32 [{rows}, {cols}] (SwiGLU [{rows}, "
        f"{2 * cols}], AddRMSNorm's R as X, W an initializer), one thread (intra- and inter-op), "
        f"ORT_ENABLE_ALL, session.run, median of >= each row's measured.repeat calls per form "
        f"timed round-robin")
    path.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n")


def parse(argv):
    p = argparse.ArgumentParser(prog="opforge_bench.export_forms", description=__doc__.split("\n")[0])
    p.add_argument("--write", type=Path, help="the export table to merge this version's row into")
    p.add_argument("--rows", type=int, default=4096)
    p.add_argument("--cols", type=int, default=4096)
    p.add_argument("--repeat", type=int, default=15)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    row = measure_row(rows=args.rows, cols=args.cols, repeat=args.repeat,
                      log=lambda line: print(line, file=sys.stderr, flush=True))
    if args.write:
        write_row(args.write, ort.__version__, row, rows=args.rows, cols=args.cols)
    else:
        print(json.dumps({ort.__version__: row}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
