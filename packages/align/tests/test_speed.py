"""A model of a few hundred nodes compares, every tensor, in seconds on a CPU."""
import json
import time

from models import chain

N_NODES = 300
LIMIT_S = 30.0  # generous for a loaded 2-core CI machine; the report prints the real time


def test_300_node_model_all_tensors_in_seconds(tmp_path, align, ort_library):
    chain(tmp_path / "chain.onnx", N_NODES)
    began = time.perf_counter()
    proc = align("run", tmp_path / "chain.onnx", "--all-tensors", "--json", tmp_path / "r.json")
    elapsed = time.perf_counter() - began
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert len(report["tensors"]) == N_NODES
    print(f"\n{N_NODES} nodes, every tensor: {elapsed:.2f} s wall (timings {report['timings_s']})")
    assert elapsed < LIMIT_S
