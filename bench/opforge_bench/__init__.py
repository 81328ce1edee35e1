"""Fused vs composed benchmarks of the opforge ops (issue 4): torch and ONNX Runtime layers,
effective bandwidth and its ratio to a memcpy of the same bytes measured in the same run."""
