"""Cross-layer numeric alignment of the opforge ops (issue 4).

Layer 1: torch composed <-> opforge_torch. Layer 2: torch -> exported ONNX (custom-domain form by
both exporters, decomposed form) -> ONNX Runtime with opforge_ort, and onnx's reference evaluator
as a third opinion. Layer 3: ONNX Runtime <-> TensorRT (GPU cells only). Cross-version: the same
ONNX file on every ONNX Runtime of a profile.

Only files cross between the torch side and the ORT side: `export` writes models, inputs, float64
references and torch outputs into a folder; `ort_check` (onnxruntime + numpy (+ onnx) only) runs
them and writes its outputs; `cross` compares the outputs of several ORT versions.
"""
