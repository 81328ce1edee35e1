"""The declarations generated from the spec (opforge_spec.generate) are committed: they must be
what the spec gives now, and they must compile."""
import subprocess
from pathlib import Path

import opforge_spec as spec
from opforge_spec import generate

# The checkout these tests belong to (opforge_spec itself may be an installed wheel).
ROOT = Path(__file__).resolve().parents[2]


def source_root():
    return ROOT


def test_generated_files_are_up_to_date():
    root = source_root()
    stale = [str(p.relative_to(root)) for p in generate.stale(root)]
    assert not stale, f"stale generated files {stale}: run `python -m opforge_spec.generate` in kernels/"


def test_a_changed_default_makes_them_stale(monkeypatch):
    root = source_root()
    old = spec.RMS_NORM.attributes["epsilon"]
    monkeypatch.setitem(spec.RMS_NORM.attributes, "epsilon", spec.Attr("epsilon", 1e-5, old.doc, old.check))
    assert {p.name for p in generate.stale(root)} == {"ops_generated.h", "schema_generated.h",
                                                      "_spec_generated.py"}


def test_torch_schemas_carry_the_spec_defaults():
    schemas = generate.torch_schemas()
    for op in spec.OPS.values():
        ((name, attr),) = op.attributes.items()
        assert f"{op.torch_name}(" in "".join(schemas) and f"float {name}={attr.default!r}" in "".join(schemas)
    assert "swiglu.out(Tensor x, float beta=1.0, *, Tensor(a!) out) -> ()" in schemas


def test_descriptors_match_the_spec(tmp_path):
    src = tmp_path / "desc.cc"
    src.write_text('#include "opforge/kernels/attrs.h"\n#include <cstdio>\n'
                   "namespace k = opforge::kernels;\n"
                   "int main() { for (const k::OpDesc* d : {&k::kSwishOp, &k::kRMSNormOp, &k::kSwiGLUOp})"
                   ' std::printf("%s %s %d %s %.9g\\n", d->name, d->torch_name, d->nb_inputs,'
                   " d->attr->name, d->attr->default_value); }\n")
    exe = tmp_path / "desc"
    subprocess.run(["g++", "-std=c++17", "-Wall", "-Werror", f"-I{spec.include_dir()}", str(src),
                    "-o", str(exe)], check=True)
    got = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split("\n")
    for line, op in zip(got, spec.OPS.values()):
        ((name, attr),) = op.attributes.items()
        assert line == f"{op.name} {op.torch_name} {len(op.inputs)} {name} {attr.default:.9g}"
