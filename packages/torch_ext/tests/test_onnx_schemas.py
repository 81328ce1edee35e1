"""register_onnx_schemas registers every op of the spec that has no schema yet, whichever came
before it in the process (it asked only whether Swish had one: a process where Swish's schema was
already registered got none for the other ops, and the dynamo exporter refuses an op without one)."""
import subprocess
import sys
import textwrap

import opforge_spec

FIRST_OP_ALREADY_REGISTERED = textwrap.dedent("""
    from onnx import defs
    import opforge_spec

    first = next(iter(opforge_spec.OPS.values()))
    param = defs.OpSchema.FormalParameter
    defs.register_schema(defs.OpSchema(
        first.name, opforge_spec.DOMAIN, opforge_spec.DOMAIN_VERSION,
        inputs=[param(n, "tensor(float)") for n in first.inputs],
        outputs=[param(n, "tensor(float)") for n in first.outputs]))

    from opforge_torch import onnx as opforge_onnx

    opforge_onnx.register_onnx_schemas()
    print(",".join(op.name for op in opforge_spec.OPS.values()
                   if not defs.has(op.name, opforge_spec.DOMAIN_VERSION, opforge_spec.DOMAIN)))
""")


def test_every_op_gets_its_schema_when_another_op_has_one_already():
    proc = subprocess.run([sys.executable, "-c", FIRST_OP_ALREADY_REGISTERED],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    without = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    assert without == "", f"ops without an ONNX schema: {without}"
    assert len(opforge_spec.OPS) > 1  # else the test could not tell the two behaviours apart
