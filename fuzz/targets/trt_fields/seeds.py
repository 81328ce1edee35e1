"""Writes corpus/: one seed per kind of field collection, in target.cpp's input format.
Run `python fuzz/targets/trt_fields/seeds.py` after changing that format."""
from __future__ import annotations

import struct
from pathlib import Path

NAMES = {"beta": 0, "epsilon": 1, "format_version": 2, None: 3, "": 4, "plugin_version": 5, "betax": 6,
         "quant_dtype": 7, "scale_ub": 8}
CUSTOM = 9
TYPES = {"f16": 0, "f32": 1, "f64": 2, "i8": 3, "i16": 4, "i32": 5, "char": 6, "dims": 7, "bf16": 9, "i64": 10}
PACK = {"f32": "<f", "f64": "<d", "i32": "<i", "i64": "<q", "i16": "<h", "i8": "<b", "f16": "<e"}
NULL_COLLECTION, NULL_ARRAY, NULL_DATA = 1, 2, 0x80


def field(name, kind: str, value=0, length: int = 1, null_data: bool = False) -> bytes:
    head = bytes([CUSTOM, len(name)]) + name if isinstance(name, bytes) else bytes([NAMES[name]])
    payload = value if isinstance(value, bytes) else struct.pack(PACK.get(kind, "<q"), value)
    type_byte = TYPES[kind] | (NULL_DATA if null_data else 0)
    return head + bytes([type_byte, length & 0xFF]) + payload.ljust(8, b"\0")[:8]


def seed(*fields: bytes, flags: int = 0, count: int | None = None) -> bytes:
    return bytes([flags, (len(fields) if count is None else count) & 0xFF]) + b"".join(fields)


FORMAT = field("format_version", "i32", 1)
SEEDS = {
    "serialized_swish": seed(field("beta", "f32", 0.5), FORMAT),
    "serialized_rmsnorm": seed(field("epsilon", "f32", 1e-5), FORMAT),
    "serialized_both_attributes": seed(field("beta", "f32", 2.0), field("epsilon", "f32", 1e-6), FORMAT),
    "onnx_attribute_beta": seed(field("beta", "f32", -0.75)),
    "onnx_attribute_epsilon_f64": seed(field("epsilon", "f64", 1e-3)),
    "no_fields": seed(),
    "null_collection": seed(flags=NULL_COLLECTION),
    "null_array_nbfields_2": seed(field("beta", "f32", 1.0), FORMAT, flags=NULL_ARRAY),
    "negative_nbfields": seed(count=-3),
    "only_format_version": seed(FORMAT),
    "repeated_beta": seed(field("beta", "f32", 0.5), FORMAT, field("beta", "f32", 3.0)),
    "repeated_format_version": seed(FORMAT, field("epsilon", "f32", 1e-5), FORMAT),
    "beta_f64_1e39": seed(field("beta", "f64", 1e39), FORMAT),
    "epsilon_f64_1e300": seed(field("epsilon", "f64", 1e300), FORMAT),
    "beta_f32_nan": seed(field("beta", "f32", float("nan")), FORMAT),
    "epsilon_negative": seed(field("epsilon", "f32", -1.0), FORMAT),
    "beta_int32": seed(field("beta", "i32", 2), FORMAT),
    "beta_length_0": seed(field("beta", "f32", 1.0, length=0), FORMAT),
    "beta_length_2": seed(field("beta", "f32", 1.0, length=2), FORMAT),
    "beta_null_data": seed(field("beta", "f32", 1.0, null_data=True), FORMAT),
    "beta_string": seed(field("beta", "char", b"1.5", length=3), FORMAT),
    "beta_dims": seed(field("beta", "dims", 1, length=1), FORMAT),
    "null_field_name": seed(field(None, "i32", 1), FORMAT),
    "empty_field_name": seed(field("", "f32", 1.0), FORMAT),
    "unknown_field_build": seed(field("plugin_version", "char", b"1", length=1), field("beta", "f32", 1.0)),
    "unknown_custom_name": seed(field(b"gamma\x01\xff", "f32", 1.0), field("beta", "f32", 1.0), FORMAT),
    "format_version_future": seed(field("beta", "f32", 1.0), field("format_version", "i32", 2)),
    "format_version_int64": seed(field("beta", "f32", 1.0), field("format_version", "i64", 1)),
    "format_version_negative_length": seed(field("epsilon", "f32", 1.0), field("format_version", "i32", 1, length=-1)),
    # an enum attribute (int32 serialized, int64 accepted) beside a float one of the same op
    "serialized_quant_int8": seed(field("epsilon", "f32", 1e-6), field("quant_dtype", "i32", 3),
                                  field("scale_ub", "f32", 0.0), FORMAT),
    "quant_dtype_fp8_int64": seed(field("quant_dtype", "i64", 17), field("scale_ub", "f32", 2.5)),
    "quant_dtype_not_a_choice": seed(field("quant_dtype", "i32", 5), FORMAT),
    "quant_dtype_f32": seed(field("quant_dtype", "f32", 3.0), FORMAT),
}


def main() -> None:
    corpus = Path(__file__).resolve().parent / "corpus"
    corpus.mkdir(exist_ok=True)
    for stale in corpus.iterdir():
        stale.unlink()
    for name, data in SEEDS.items():
        (corpus / name).write_bytes(data)


if __name__ == "__main__":
    main()
