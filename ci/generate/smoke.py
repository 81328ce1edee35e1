"""The release workflow's smoke test (its "Smoke test" step): the PyPI files installed as a user
installs them, then every op of the spec (opforge_spec.OPS, as installed) on its first case in
opforge_torch and in a one-node ONNX Runtime model through opforge_ort, each against the spec's
float64 reference within its tolerances (a quantized output within one step). It names no op:
a new op of the spec is smoke-tested by itself."""

SMOKE = """\
python3 -m venv "$RUNNER_TEMP/smoke"
# the PyPI files plus their declared dependencies from the index, nothing else
"$RUNNER_TEMP/smoke/bin/pip" install --find-links pypi \\
  --only-binary opforge-torch,opforge-ort 'opforge-torch[onnx]' opforge-ort
"$RUNNER_TEMP/smoke/bin/python" - <<'PY'
import numpy as np
import onnxruntime as ort
import torch
from onnx import TensorProto, helper

import opforge_ort
import opforge_spec
import opforge_torch

options = ort.SessionOptions()
options.register_custom_ops_library(opforge_ort.library_path())


def ort_outputs(op, case, attrs):
    node = helper.make_node(op.name, list(op.inputs), list(op.outputs), domain=opforge_spec.DOMAIN,
                            **attrs)
    out_types = [opforge_spec.DTYPE_CODES[op.output_dtype(n, "float32", attrs)] for n in op.outputs]
    graph = helper.make_graph(
        [node], "smoke",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, x.shape) for n, x in zip(op.inputs, case.inputs)],
        [helper.make_tensor_value_info(n, code, None) for n, code in zip(op.outputs, out_types)])
    model = helper.make_model(graph, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid(opforge_spec.DOMAIN, opforge_spec.DOMAIN_VERSION)])
    model.ir_version = 8
    sess = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    got = sess.run(None, dict(zip(op.inputs, case.inputs)))
    return got if len(op.outputs) > 1 else got[0]


# every op of the spec, on its first case, against the spec's float64 reference in both runtimes
for op in opforge_spec.OPS.values():
    case = op.cases("float32")[0]
    attrs = {name: float(value) if op.attributes[name].kind == "float" else int(value)
             for name, value in {**op.defaults(), **case.attrs}.items()}
    want = op.reference(*case.inputs, **attrs)
    got = getattr(opforge_torch, op.torch_name)(*map(torch.from_numpy, case.inputs), *attrs.values())
    op.check_close(got, want, "float32", case.inputs, f"{case.name} (opforge_torch)", attrs)
    op.check_close(ort_outputs(op, case, attrs), want, "float32", case.inputs, f"{case.name} (opforge_ort)",
                   attrs)
print("opforge smoke:", ", ".join(opforge_spec.OPS), "match the spec in torch", torch.__version__,
      "and ORT", ort.__version__, "(", opforge_ort.library_path(), "); numpy", np.__version__)
PY
"""
