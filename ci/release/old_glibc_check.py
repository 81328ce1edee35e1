"""The old-glibc check, run by the old release's own python3 inside its root (ci/release/old_glibc.py
copies this file in as check.py): every op of the spec in opforge-ort and through opforge-loader's
plugins, against the spec's float64 references; opforge-torch's library loaded with RTLD_NOW next
to torch's. Its only argument: the work folder, as the root sees it. Not imported by ci/."""
# ruff: noqa: E402  (each part imports its package where it begins: torch's libraries load first)
import ctypes
import glob
import os
import sys

import numpy as np

work = sys.argv[1]  # the work folder, as the chroot sees it

print("glibc", (os.confstr("CS_GNU_LIBC_VERSION") or "?").split()[-1], "python", sys.version.split()[0])
import opforge_spec as spec

ops = spec.OPS
# Per op of the spec, its first case with attributes set (their passing is checked too), if any.
cases = {name: next((c for c in op.cases("float32") if c.attrs), op.cases("float32")[0])
         for name, op in ops.items()}
inputs = {name: [np.asarray(a, np.float32) for a in case.inputs] for name, case in cases.items()}
attrs = {name: case.attrs for name, case in cases.items()}
expected = {op: ops[op].reference(*inputs[op], **attrs[op]) for op in ops}


def agree(what, got, op):  # the spec's float32 tolerance against its float64 reference
    ops[op].check_close(got, expected[op], "float32", inputs[op], what)


for name in ("libc10.so", "libtorch_cpu.so"):
    ctypes.CDLL(os.path.join(work, "torch-lib", name), mode=ctypes.RTLD_GLOBAL)
ours = sorted(glob.glob(os.path.join(work, "opforge_torch", "**", "libopforge_torch*.so*"), recursive=True))
assert ours, "no opforge_torch library in the unpacked wheel"
ctypes.CDLL(ours[0], mode=os.RTLD_NOW | os.RTLD_LOCAL)
print("opforge_torch: loaded with RTLD_NOW next to torch's libraries")

import onnx  # noqa: F401  (onnx loads before onnxruntime, as it always did here)
import onnxruntime as ort
from onnx import TensorProto, helper

import opforge_ort

for op, feeds in inputs.items():
    names = list(ops[op].inputs)
    node = helper.make_node(op, names, ["Y"], domain="opforge", **attrs[op])
    graph = helper.make_graph(
        [node], op, [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in names],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("opforge", 1)])
    model.ir_version = 8
    session = ort.InferenceSession(model.SerializeToString(), opforge_ort.session_options(),
                                   providers=["CPUExecutionProvider"])
    agree("onnxruntime " + ort.__version__, session.run(None, dict(zip(names, feeds)))[0], op)
print("opforge_ort:", ", ".join(ops), "in onnxruntime", ort.__version__)

import opforge_loader

registry = opforge_loader.Registry(opforge_loader.plugin_dir())
for op, feeds in inputs.items():
    agree("opforge_loader", registry.run(op, feeds, attrs[op]), op)
print("opforge_loader:", ", ".join(ops), "through the shipped plugin")
