"""opforge_ort reads the op spec from opforge-spec (its dependency) when imported: no file of the
package lists the ops, and what it reads is what the library was built from (the manifest)."""
import opforge_ort
import opforge_spec as spec
from opforge_ort import _spec, models


def test_the_domain_and_the_ops_are_the_spec_s():
    assert (opforge_ort.DOMAIN, opforge_ort.DOMAIN_VERSION) == (spec.DOMAIN, spec.DOMAIN_VERSION)
    assert opforge_ort.OPS == tuple(spec.OPS)
    assert [entry["name"] for entry in opforge_ort.manifest()["ops"]] == list(opforge_ort.OPS)


def test_the_attributes_and_outputs_are_the_spec_s():
    for op in spec.OPS.values():
        assert opforge_ort.ATTRIBUTES[op.name] == tuple((a.name, a.default) for a in op.attributes.values())
        assert [o for o, _dtype, _shape in _spec.OUTPUTS[op.name]] == list(op.outputs)


def test_an_output_dtype_picked_by_an_attribute_is_found():
    """models.check_output_dtypes's table, for every op whose output dtype an enum attribute picks."""
    for op in spec.OPS.values():
        picked = {rule: output for output, rule in op.output_dtypes.items() if rule in op.attributes}
        got = models._dtype_attributes(op.name)
        assert {attr: output for attr, (output, _default, _choices) in got.items()} == picked, op.name
        for attr, (_output, default, choices) in got.items():
            assert (default, choices) == (int(op.attributes[attr].default), op.attributes[attr].choices)
    assert "quant_dtype" in models._dtype_attributes("RMSNormQuant")
