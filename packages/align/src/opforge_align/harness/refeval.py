"""onnx's reference evaluator with opforge::Swish / RMSNorm / SwiGLU written here in numpy, on
purpose differently from opforge_spec's reference (another formula, same float64 precision): an
independent third opinion on what the exported graph means (wiring, attributes, defaults)."""
from __future__ import annotations

import numpy as np
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun


class Swish(OpRun):
    op_domain = "opforge"

    # onnx >= 1.19 also has an ai.onnx Swish (attribute alpha) and offers its attributes too.
    def _run(self, x, beta=None, alpha=None):
        beta = 1.0 if beta is None else beta
        x64 = x.astype(np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            y = x64 / (1.0 + np.exp(-beta * x64))  # exp overflow -> x/inf = 0: the right limit
        return (y.astype(x.dtype),)


class RMSNorm(OpRun):
    op_domain = "opforge"

    def _run(self, x, w, epsilon=None):
        epsilon = 1e-6 if epsilon is None else epsilon
        x64 = x.astype(np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            denom = np.mean(np.square(x64), axis=-1, keepdims=True) + epsilon
            if x.shape[-1] == 0:
                return (np.zeros_like(x),)
            y = np.where(denom == 0.0, 0.0, x64 / np.sqrt(denom)) * w.astype(np.float64)
        return (y.astype(x.dtype),)


class SwiGLU(OpRun):
    op_domain = "opforge"

    # like Swish, onnx offers the attributes of its own Swish (alpha) to this op as well
    def _run(self, x, beta=None, alpha=None):
        beta = 1.0 if beta is None else beta
        a, b = np.split(x.astype(np.float64), 2, axis=-1)
        with np.errstate(over="ignore", invalid="ignore"):
            y = a / (1.0 + np.exp(-beta * a)) * b
        return (y.astype(x.dtype),)


def evaluator(model_path: str) -> ReferenceEvaluator:
    return ReferenceEvaluator(model_path, new_ops=[Swish, RMSNorm, SwiGLU])
