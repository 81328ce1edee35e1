"""opforge's op spec: the single definition of each operator that every layer is built and tested
against, plus the location of the shared kernel headers."""
from __future__ import annotations

from pathlib import Path

from .model import (
    DOMAIN,
    DOMAIN_VERSION,
    DTYPE_CODES,
    FLOAT32_OVERFLOW,
    INT_LIMIT,
    QUANT_FAMILIES,
    RANK_AT_LEAST_1,
    RESIDUAL_EXPECTED,
    WEIGHT_EXPECTED,
    WEIGHT_FLOAT32_WITH,
    Attr,
    BadCase,
    Case,
    OpSpec,
    StandardForm,
    enum_attr,
    error,
    finite_in_float32,
    format_number,
    int_attr,
    strided,
    weight_dtypes,
)
from .numerics import (
    DTYPES,
    QUANTIZED_DTYPES,
    Errors,
    dtype_name,
    measure,
    quant_step,
    quantized_errors,
    round_to,
    ulp,
)
from .ops import (
    ADD_RMS_NORM,
    GEGLU,
    GELU_CUBIC,
    OPS,
    RMS_NORM,
    SQRT_2_OVER_PI,
    SWIGLU,
    SWISH,
    output_shape,
    standard_equivalents,
    standard_forms,
)

__all__ = [
    "ADD_RMS_NORM",
    "DOMAIN",
    "DOMAIN_VERSION",
    "DTYPES",
    "DTYPE_CODES",
    "FLOAT32_OVERFLOW",
    "GEGLU",
    "GELU_CUBIC",
    "INT_LIMIT",
    "OPS",
    "QUANTIZED_DTYPES",
    "QUANT_FAMILIES",
    "RANK_AT_LEAST_1",
    "RESIDUAL_EXPECTED",
    "RMS_NORM",
    "SQRT_2_OVER_PI",
    "SWIGLU",
    "SWISH",
    "WEIGHT_EXPECTED",
    "WEIGHT_FLOAT32_WITH",
    "Attr",
    "BadCase",
    "Case",
    "Errors",
    "OpSpec",
    "StandardForm",
    "dtype_name",
    "enum_attr",
    "error",
    "finite_in_float32",
    "format_number",
    "include_dir",
    "int_attr",
    "measure",
    "output_shape",
    "quant_step",
    "quantized_errors",
    "round_to",
    "standard_equivalents",
    "standard_forms",
    "strided",
    "ulp",
    "weight_dtypes",
]


def include_dir() -> Path:
    """Folder holding `opforge/kernels/*.h` (installed copy, else the source tree's)."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "include", here.parent / "include"):
        if (candidate / "opforge" / "kernels" / "math.h").exists():
            return candidate
    raise FileNotFoundError("opforge_spec: kernel headers not found next to the package")
