"""The values of matrix.yaml: versions, exact pins, conditions, arch lists, placeholders, and the
annotated types the schema declares its fields with."""

from __future__ import annotations

import dataclasses
import re
import string
from collections.abc import Callable
from typing import Annotated, Any, Literal, cast

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version
from pydantic import AfterValidator, Field, PlainValidator

from ci.model.errors import MatrixError, refuse, show

# axis name (used in rules, profiles, filters) -> the section holding its values
AXES = {"toolkit": "toolkits", "torch": "torch", "arch_list": "arch_lists", "opset": "opsets",
        "ort": "ort", "tensorrt": "tensorrt"}
Axis = Literal["toolkit", "torch", "arch_list", "opset", "ort", "tensorrt"]
# The package whose pin names an axis value: its version must be the value (the key).
AXIS_PACKAGES = {"torch": ("torch",), "ort": ("onnxruntime", "onnxruntime-gpu")}
ORDER_OPS = {">=", "<=", ">", "<"}
CONDITION = re.compile(r"^(?P<attr>[A-Za-z_][\w.]*)\s+(?:(?P<op>==|!=|>=|<=|>|<|in)\s+"
                       r"(?P<operand>\S+)|(?P<unary>set|unset))$")
ARCH_LIST = re.compile(r"\d+\.\d+[af]?(\+PTX)?(;\d+\.\d+[af]?(\+PTX)?)*")
SETTING_NAME = re.compile(r"[A-Za-z_]\w*")
VERSION_EXPECTED = 'a version such as "1.17.3"'
PIN_EXPECTED = "an exact pin name==version (no options, markers, URLs, extras or spaces)"

def is_version(value: Any) -> bool:
    """A version as pip writes it (PEP 440, canonical): "1.17.3"; not "v1.17", "1.17 ", 1.17."""
    try:
        return isinstance(value, str) and str(Version(value)) == value
    except InvalidVersion:
        return False


def parse_version(text: Any, where: str) -> Version:
    if not is_version(text):
        raise MatrixError(where, f"expected {VERSION_EXPECTED}, got {show(text)}")
    return Version(text)


def version_key(text: Any) -> Version:
    return Version(str(text))


def major(value: Any) -> str | None:
    return None if value is None else str(value).split(".")[0]


def pin_parts(text: Any) -> tuple[str, Version] | None:
    """The canonical name and version of `name==version` exactly (what pip is handed)."""
    try:
        requirement = Requirement(text) if isinstance(text, str) else None
    except InvalidRequirement:
        return None
    specifiers = list(requirement.specifier) if requirement else []
    if (requirement is None or requirement.url or requirement.marker or requirement.extras
            or len(specifiers) != 1 or specifiers[0].operator != "=="
            or not is_version(specifiers[0].version)
            or text != f"{requirement.name}=={specifiers[0].version}"):
        return None
    return canonicalize_name(requirement.name), Version(specifiers[0].version)


def parse_pin(text: Any, where: str) -> tuple[str, Version]:
    parts = pin_parts(text)
    if parts is None:
        raise MatrixError(where, f"expected {PIN_EXPECTED}, got {show(text)}")
    return parts


def checked(ok: Callable[[Any], Any], expected: str) -> PlainValidator:
    """A value `ok` accepts, else "expected <expected>, got <the input>"."""
    def check(value: Any) -> Any:
        if not ok(value):
            raise refuse(f"expected {expected}, got {show(value)}")
        return value
    return PlainValidator(check)


def _one_pin_each(pins: tuple[str, ...]) -> tuple[str, ...]:
    names = [cast("tuple[str, Version]", pin_parts(pin))[0] for pin in pins]  # each checked a pin
    for index, name in enumerate(names):
        if name in names[:index]:
            raise refuse(f"{name} is pinned twice", at=index)
    return pins


def _axis_value(value: Any) -> str:
    if isinstance(value, float):
        raise refuse(f"YAML reads {value} as a number: quote it")
    if not isinstance(value, str) or not value:
        raise refuse(f"expected a quoted string, got {show(value)}")
    return value


@dataclasses.dataclass(frozen=True)
class Condition:
    attr: str
    op: str                 # == != >= <= > < in set unset
    operand: str | None     # literal text, or "$attr"
    text: str


def _condition(text: Any) -> Condition:
    if not isinstance(text, str):
        raise refuse(f"expected a condition string like 'ort >= 1.18', got {show(text)}")
    found = CONDITION.match(text.strip())
    if not found:
        raise refuse(f"cannot read condition {text!r} (expected 'ATTR OP OPERAND' with OP in "
                      "== != >= <= > < in, or 'ATTR set' / 'ATTR unset')")
    op, operand = found["op"] or found["unary"], found["operand"]
    if op in ORDER_OPS and not operand.startswith("$") and not is_version(operand):
        raise refuse(f"expected {VERSION_EXPECTED}, got {show(operand)}")
    return Condition(found["attr"], op, operand, text.strip())


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float))


VersionText = Annotated[str, checked(is_version, VERSION_EXPECTED)]
Pins = Annotated[tuple[Annotated[str, checked(pin_parts, PIN_EXPECTED)], ...],
                 AfterValidator(_one_pin_each), Field(description="a list of exact pins")]
ArchList = Annotated[str, checked(lambda value: isinstance(value, str) and ARCH_LIST.fullmatch(
    value), 'a TORCH_CUDA_ARCH_LIST such as "8.0;9.0"')]
Opset = Annotated[int, checked(lambda value: type(value) is int and value >= 1, "an opset number")]
AxisValue = Annotated[str, PlainValidator(_axis_value)]
AxisValues = Annotated[tuple[AxisValue, ...],
                       Field(min_length=1, description="a non-empty list of values")]
SettingName = Annotated[str, checked(lambda value: isinstance(value, str) and SETTING_NAME.fullmatch(
    value), "a setting name (letters, digits, _)")]
Scalar = Annotated[Any, checked(_is_scalar, "text, a number, true/false or null")]
Conditions = Annotated[tuple[Annotated[Condition, PlainValidator(_condition)], ...],
                       Field(description="a list of conditions")]
# a `why:` the reports print: text with something in it ("   " says nothing)
Reason = Annotated[str, checked(lambda value: isinstance(value, str) and value.strip(),
                                "text saying why (not blank)")]


def placeholders(texts: list[str]) -> set[str]:
    return {field for text in texts for _, field, _, _ in string.Formatter().parse(text) if field}
