"""The declared schema of matrix.yaml (pydantic): every section, field by field.

Unknown keys are refused; versions are canonical PEP 440 text ("1.20", never the number 1.2),
packages exact `name==version` pins; conditions, arch lists and placeholders must be readable.
The model validators check what refers to something else: rules to axes and their properties,
stages to earlier stages, settings and `tools:`, profiles to axis values and stages (closed under
`after`), the suite to values and profiles.

A ValidationError becomes ONE line, MatrixError `matrix.yaml: <where>: <problem>`: the key path
(`stages.unit-ort.after[0]`, a rule by its id), what was expected and the input.
"""
# ruff: noqa: UP045  (pydantic evaluates these annotations at run time: `X | None` needs 3.10)
from __future__ import annotations

import dataclasses
import math
import re
import string
import typing
from collections.abc import Callable, Mapping
from typing import Annotated, Any, ClassVar, Literal, Optional

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)
from pydantic.dataclasses import dataclass as checked_dataclass
from pydantic_core import PydanticCustomError

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
MAX_COMBINATIONS = 50_000        # axis-value combinations over all profiles
MAX_SHOWN = 300                  # characters of an input value quoted in a message
VERSION_EXPECTED = 'a version such as "1.17.3"'
PIN_EXPECTED = "an exact pin name==version (no options, markers, URLs, extras or spaces)"
# what pydantic's type errors expect, in matrix.yaml's words
TYPE_WORDS = {"string_type": "text", "dict_type": "a mapping", "list_type": "a list",
              "tuple_type": "a list", "bool_type": "true or false", "int_type": "a whole number",
              "invalid_key": "a text key"}


class MatrixError(ValueError):
    """A problem in matrix.yaml; str() is the one line to print."""

    def __init__(self, where: str, problem: str, file: str = "matrix.yaml"):
        where, problem = _one_line(where, MAX_SHOWN), _one_line(problem, 3 * MAX_SHOWN)
        self.where, self.problem = where, problem
        super().__init__(f"{file}: {where}: {problem}" if where else f"{file}: {problem}")


def _one_line(text: str, limit: int) -> str:
    """Input quoted in a message may hold newlines, control characters or a megabyte of text."""
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text)[:limit + 1])
    return text if len(text) <= limit else text[:limit] + "..."


def show(value: Any) -> str:
    return f"{type(value).__name__} {value!r}" if not isinstance(value, str) else repr(value)


def _refuse(problem: str, at: Any = None) -> PydanticCustomError:
    """A problem at the value being validated (or at its key or index `at`)."""
    return PydanticCustomError("matrix", "{problem}", {"problem": problem, "at": at})


# ------------------------------------------------------------------------------------- values


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


def _pin_parts(text: Any) -> tuple[str, Version] | None:
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
    parts = _pin_parts(text)
    if parts is None:
        raise MatrixError(where, f"expected {PIN_EXPECTED}, got {show(text)}")
    return parts


def _checked(ok: Callable[[Any], Any], expected: str) -> PlainValidator:
    """A value `ok` accepts, else "expected <expected>, got <the input>"."""
    def check(value: Any) -> Any:
        if not ok(value):
            raise _refuse(f"expected {expected}, got {show(value)}")
        return value
    return PlainValidator(check)


def _one_pin_each(pins: tuple[str, ...]) -> tuple[str, ...]:
    names = [_pin_parts(pin)[0] for pin in pins]
    for index, name in enumerate(names):
        if name in names[:index]:
            raise _refuse(f"{name} is pinned twice", at=index)
    return pins


def _axis_value(value: Any) -> str:
    if isinstance(value, float):
        raise _refuse(f"YAML reads {value} as a number: quote it")
    if not isinstance(value, str) or not value:
        raise _refuse(f"expected a quoted string, got {show(value)}")
    return value


@dataclasses.dataclass(frozen=True)
class Condition:
    attr: str
    op: str                 # == != >= <= > < in set unset
    operand: str | None     # literal text, or "$attr"
    text: str


def _condition(text: Any) -> Condition:
    if not isinstance(text, str):
        raise _refuse(f"expected a condition string like 'ort >= 1.18', got {show(text)}")
    found = CONDITION.match(text.strip())
    if not found:
        raise _refuse(f"cannot read condition {text!r} (expected 'ATTR OP OPERAND' with OP in "
                      "== != >= <= > < in, or 'ATTR set' / 'ATTR unset')")
    op, operand = found["op"] or found["unary"], found["operand"]
    if op in ORDER_OPS and not operand.startswith("$") and not is_version(operand):
        raise _refuse(f"expected {VERSION_EXPECTED}, got {show(operand)}")
    return Condition(found["attr"], op, operand, text.strip())


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float))


VersionText = Annotated[str, _checked(is_version, VERSION_EXPECTED)]
Pins = Annotated[tuple[Annotated[str, _checked(_pin_parts, PIN_EXPECTED)], ...],
                 AfterValidator(_one_pin_each), Field(description="a list of exact pins")]
ArchList = Annotated[str, _checked(lambda value: isinstance(value, str) and ARCH_LIST.fullmatch(
    value), 'a TORCH_CUDA_ARCH_LIST such as "8.0;9.0"')]
Opset = Annotated[int, _checked(lambda value: type(value) is int and value >= 1, "an opset number")]
AxisValues = Annotated[tuple[Annotated[str, PlainValidator(_axis_value)], ...],
                       Field(min_length=1, description="a non-empty list of values")]
SettingName = Annotated[str, _checked(lambda value: isinstance(value, str) and SETTING_NAME.fullmatch(
    value), "a setting name (letters, digits, _)")]
Scalar = Annotated[Any, _checked(_is_scalar, "text, a number, true/false or null")]
Conditions = Annotated[tuple[Annotated[Condition, PlainValidator(_condition)], ...],
                       Field(description="a list of conditions")]


def placeholders(texts: list[str]) -> set[str]:
    return {field for text in texts for _, field, _, _ in string.Formatter().parse(text) if field}


# -------------------------------------------------------------------------------------- models


class Section(BaseModel):
    """A mapping with these keys and no others."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    unknown: ClassVar[str] = "unknown key"


def _section(name: str, **fields: Any) -> type[Section]:
    return create_model(name, __base__=Section, **fields)


Text = (StrictStr, ...)
DebianPackage = _section("DebianPackage", debian_suite=Text, package=Text, version=Text)
Sources = _section("Sources", ort_headers=(DebianPackage, ...),
                   # restated floors/pins of packages (tests/ci check them against the package)
                   ort_min_api=(Optional[StrictInt], None),
                   trt_headers=(Optional[_section("PypiPackage", pypi=Text, version=Text)], None))
# The properties of an axis value (a toolkit's: ci/toolkits.py parse_spec).
TorchRelease = _section("TorchRelease", cuda=(Optional[VersionText], None),
                        packages=(Optional[Pins], None))
# gpu_packages: what the ORT venvs of a `gpu: true` profile install instead (onnxruntime-gpu).
OrtRelease = _section("OrtRelease", packages=(Optional[Pins], None),
                      gpu_packages=(Optional[Pins], None))
ArchListProps = _section("ArchListProps", min_cuda=(VersionText, ...))
OpsetProps = _section("OpsetProps", min_ort=(VersionText, ...))
TensorrtRelease = _section("TensorrtRelease", cuda_majors=(tuple[VersionText, ...], ...))
Suite = _section("Suite", ort=(StrictStr, Field(description="an ONNX Runtime release of ort:")))
DEBIAN_PACKAGE = re.compile(r"[a-z0-9][a-z0-9.+-]+")
IMAGE_BY_DIGEST = re.compile(r"[a-z0-9./_:-]+@sha256:[0-9a-f]{64}")
DebianPackageName = Annotated[str, _checked(lambda value: isinstance(value, str) and DEBIAN_PACKAGE.fullmatch(
    value), "a Debian package name (no version: docker/apt.lock holds the versions)")]
ImageByDigest = Annotated[str, _checked(lambda value: isinstance(value, str) and IMAGE_BY_DIGEST.fullmatch(
    value), "an image pinned by digest, NAME[:TAG]@sha256:<64 hex digits>")]
Container = _section(
    "Container", debian=(StrictStr, Field(description="a Debian release")),
    apt=(tuple[DebianPackageName, ...], Field((), description="a list of Debian package names")),
    alternative_base=(Optional[ImageByDigest], None))


class Rule(Section):
    id: StrictStr = Field(min_length=1, description="a rule id")
    why: StrictStr = ""
    when: Conditions = ()
    require: Conditions = ()
    set: dict[StrictStr, Scalar] = Field({}, description="a mapping of settings")

    @model_validator(mode="after")
    def _says_why_and_does_something(self) -> Rule:
        if not self.why.strip():
            raise _refuse("every rule says why it exists", at="why")
        if not {"require", "set"} & self.model_fields_set:
            raise _refuse("expected require or set (a rule with neither does nothing)")
        return self


@checked_dataclass(frozen=True, config=ConfigDict(extra="forbid"))
class Stage:
    """A stage; its name is its key in `stages:`."""

    unknown: ClassVar[str] = "unknown key"
    name: StrictStr
    kind: Literal["build", "pytest", "script", "wheel"] = Field(
        description="one of build, pytest, script, wheel")
    package: Optional[StrictStr] = Field(None, description="a folder name under packages/")
    venv: Literal["torch", "ort", None] = None
    cuda: Literal["always", "never", "torch", "required"] = "never"
    depends: tuple[Axis, ...] = Field((), description="a list of axes")
    after: tuple[StrictStr, ...] = Field((), description="a list of earlier stages")
    needs: tuple[Literal["gpu", "tensorrt-runtime"], ...] = Field((), description="a list")
    cache: Literal["inputs", "run"] = "inputs"
    run: tuple[StrictStr, ...] = Field((), description="an argv list [script.py, args...]")
    env: dict[StrictStr, StrictStr] = Field(default_factory=dict, description="NAME: text")
    key: Literal["full", "own"] = "full"
    gather: Literal[Axis, None] = None    # runs once the cells differing only in it are done
    slow: StrictBool = False              # skipped with --skip-slow
    tests: Optional[StrictStr] = None     # pytest: the folder (default packages/<package>/tests)
    tools: tuple[StrictStr, ...] = Field((), description="a list of tools: names")
    serial: StrictBool = False            # pytest: not under pytest-xdist

    @property
    def tests_dir(self) -> str:
        return self.tests or f"packages/{self.package}/tests"

    def placeholders(self) -> set[str]:
        return placeholders([*self.run, *self.env.values()])

    @field_validator("run", "env")
    @classmethod
    def _readable_placeholders(cls, texts: tuple[str, ...] | dict[str, str]) -> Any:
        for at, text in (texts.items() if isinstance(texts, dict) else enumerate(texts)):
            try:
                list(string.Formatter().parse(text))
            except ValueError as exc:         # an unclosed `{out`
                raise _refuse(f"{text!r}: {exc}", at=at) from None
        return texts

    @model_validator(mode="after")
    def _what_its_kind_needs(self) -> Stage:
        tests = self.tests
        if tests is not None and self.kind != "pytest":
            raise _refuse(f"only a pytest stage has tests (kind: {self.kind})", at="tests")
        if tests is not None and (not tests or tests[0] == "/" or ".." in tests.split("/")):
            raise _refuse("expected a folder relative to the repository without '..', got "
                          f"{show(tests)}", at="tests")
        if self.kind in ("pytest", "script") and self.venv is None:
            raise _refuse(f"a {self.kind} stage runs in a venv: torch or ort", at="venv")
        needed = self.kind == "build" or (self.kind == "pytest" and tests is None)
        if (needed or self.package is not None) and (not self.package or "/" in self.package):
            raise _refuse(f"expected a folder name under packages/, got {show(self.package)}",
                          at="package")
        if self.kind == "script" and not self.run:
            raise _refuse("expected run: [script.py, args...] (text)", at="run")
        if self.gather and (self.gather in self.depends or self.key != "own"):
            raise _refuse(f"a stage gathering {self.gather} has key: own and does not depend "
                          f"on {self.gather}", at="gather")
        return self


VARIANT_NAME = re.compile(r"[a-z0-9]+")   # also the wheels' PEP 440 local version label


class Variant(Section):
    """A build variant a release ships (profile `variants:`): the profile's axis values with these
    overrides; its wheels carry the local version label `+<name>` unless it is the default."""

    unknown: ClassVar[str] = "unknown key"
    description: StrictStr = ""
    toolkit: Optional[AxisValues] = None
    torch: Optional[AxisValues] = None
    arch_list: Optional[AxisValues] = None
    cpu_builds: StrictBool = False
    default: StrictBool = False     # plain version (no label): the variant for PyPI
    skip: Optional[StrictStr] = Field(None, description="why the variant is declared but not built")


def _variant_names(variants: dict | None) -> dict | None:
    if variants is None:
        return None
    for name in variants:
        if not VARIANT_NAME.fullmatch(name):
            raise _refuse(f"{name!r}: a variant name is its wheels' local version label: "
                          "lower-case letters and digits, e.g. cu130")
    defaults = [name for name, variant in variants.items() if variant.default]
    if len(defaults) != 1:
        raise _refuse(f"expected exactly one variant with default: true, got {len(defaults)}"
                      + (f" ({', '.join(defaults)})" if defaults else ""))
    if variants[defaults[0]].skip:
        raise _refuse(f"the default variant {defaults[0]} cannot be skipped")
    return variants


class OldGlibc(Section):
    """Where `nox -s release` runs the default variant on an older glibc (ci/old_glibc.py)."""

    debian: StrictStr = Field(description="a Debian release the mirror serves (debootstrapped)")
    packages: tuple[StrictStr, ...] = Field(min_length=1, description="pins for its python3")


class Profile(Section):
    """Axis values (the cells: their product less what the rules exclude); its name is its key."""

    unknown: ClassVar[str] = "unknown axis or key"
    name: StrictStr
    description: StrictStr = ""
    runs_on: tuple[StrictStr, ...] = Field((), description="a list of runner labels")
    toolkit: AxisValues
    torch: AxisValues
    arch_list: AxisValues
    opset: tuple[Opset, ...] = Field(min_length=1, description="a non-empty list of opsets")
    ort: AxisValues
    tensorrt: AxisValues
    stages: Optional[tuple[StrictStr, ...]] = Field(None, description="a list of stage names")
    cpu_builds: StrictBool = False
    gpu: StrictBool = False    # its ORT venvs install the ort values' gpu_packages
    # portable: packages with `tools: [ziglang]` build with zig for glibc 2.28 (what ships);
    # native: with the host's compiler (the suite: zig first builds its libc++, minutes)
    toolchain: Literal["portable", "native"] = "portable"
    # a release: its cells are the union of each variant's (the profile's values, overridden)
    variants: Annotated[Optional[dict[StrictStr, Variant]], AfterValidator(_variant_names)] = \
        Field(None, description="a mapping of variant names to variants")
    old_glibc: Optional[OldGlibc] = None

    @field_validator(*AXES, "stages")
    @classmethod
    def _each_once(cls, values: tuple | None) -> tuple | None:
        for index, value in enumerate(values or ()):
            if value in values[:index]:
                raise _refuse(f"duplicate value {value!r}")
        return values

    @property
    def values(self) -> dict[str, tuple[str, ...]]:
        """axis -> values"""
        return {axis: tuple(map(str, getattr(self, axis))) for axis in AXES}


def _values_of(kind: Any, what: str) -> Any:
    return Annotated[kind, Field(min_length=1, description=f"a non-empty mapping of {what}")]


class MatrixFile(Section):
    unknown: ClassVar[str] = "unknown section"
    sources: Optional[Sources] = None
    tools: dict[StrictStr, VersionText] = Field({}, description='a mapping name: "version"')
    python: dict[StrictStr, VersionText] = Field({}, description='a mapping name: "version"')
    toolkits: _values_of(dict[StrictStr, Any], "toolkit ids to their specs")
    torch: _values_of(dict[VersionText, TorchRelease], "torch releases")
    arch_lists: _values_of(dict[ArchList, ArchListProps], "arch lists")
    opsets: _values_of(dict[Opset, OpsetProps], "opsets")
    ort: _values_of(dict[VersionText, OrtRelease], "ONNX Runtime releases")
    tensorrt: _values_of(dict[VersionText, TensorrtRelease], "TensorRT releases")
    settings: dict[SettingName, Scalar] = Field(description="a mapping of setting: default")
    rules: tuple[Rule, ...] = Field(description="a list of rules")
    stage_defaults: dict[StrictStr, dict[StrictStr, Any]] = Field(
        {}, description="a mapping of names to stage keys")
    stages: dict[StrictStr, Stage] = Field(description="a mapping of stage names")
    profiles: dict[StrictStr, Profile] = Field(description="a mapping of profile names")
    suite: Suite
    container: Optional[Container] = None

    @field_validator("tools", "python")
    @classmethod
    def _pinned_once(cls, pins: dict[str, str], info: Any) -> dict[str, str]:
        names: dict[str, str] = {}
        for name, version in pins.items():
            canonical, _ = parse_pin(f"{name}=={version}", f"{info.field_name}.{name}")
            if canonical in names:
                raise MatrixError(f"{info.field_name}.{name}",
                                  f"{name} is pinned twice (also as {names[canonical]})")
            names[canonical] = name
        return pins

    @field_validator("toolkits")
    @classmethod
    def _toolkit_specs(cls, raw: dict[str, Any]) -> dict[str, Any]:
        """ci/toolkits.py declares what a toolkit is; its pins are exact pins as everywhere."""
        from ci import toolkits

        specs = {}
        for tid, spec in raw.items():
            try:
                specs[tid] = toolkits.parse_spec(tid, spec)
            except toolkits.SpecError as exc:
                raise MatrixError(exc.where, exc.problem) from None
            for index, pin in enumerate(specs[tid].packages):
                parse_pin(pin, f"toolkits.{tid}.packages[{index}]")
            if specs[tid].cuobjdump:
                parse_pin(specs[tid].cuobjdump, f"toolkits.{tid}.cuobjdump")
        return specs

    @model_validator(mode="before")
    @classmethod
    def _stages_with_defaults(cls, data: Any) -> Any:
        """A stage's `defaults: NAME` takes the keys of stage_defaults.NAME it does not set."""
        if not isinstance(data, Mapping) or not isinstance(data.get("stages"), Mapping):
            return data
        groups = data.get("stage_defaults") or {}
        if not isinstance(groups, Mapping):
            return data              # the field's own check names the problem
        _check_default_groups(groups)
        stages = {name: _with_defaults(name, spec, groups) for name, spec in data["stages"].items()}
        return {**data, "stages": stages}

    @field_validator("stages", "profiles", mode="before")
    @classmethod
    def _named_by_key(cls, named: Any, info: Any) -> Any:
        if not isinstance(named, Mapping):
            return named
        for name, spec in named.items():
            if isinstance(spec, Mapping) and "name" in spec:
                raise MatrixError(f"{info.field_name}.{name}.name", "unknown key (the name is the key)")
        return {name: {**spec, "name": name} if isinstance(spec, Mapping) else spec
                for name, spec in named.items()}

    def axes(self) -> dict[str, dict[str, dict[str, Any]]]:
        """axis -> value -> properties (plain data, as matrix.yaml writes them)."""
        out = {"toolkit": {tid: spec.data() for tid, spec in self.toolkits.items()}}
        for axis, section in AXES.items():
            if axis != "toolkit":
                out[axis] = {str(value): props.model_dump(mode="json")
                             for value, props in getattr(self, section).items()}
        return out

    @model_validator(mode="after")
    def _cross_references(self) -> MatrixFile:
        axes = self.axes()
        _check_axis_pins(axes)
        for name, value in self.settings.items():
            _check_setting(name, value, f"settings.{name}", self.python)
        _check_rules(self.rules, axes, self.settings, self.python)
        _check_stages(self.stages, self.settings, self.tools)
        _check_profiles(self.profiles, axes, self.stages)
        _check_suite(self.suite, axes)
        return self


# ------------------------------------------------------------------------------ stage defaults

STAGE_KEYS = tuple(name for name in Stage.__pydantic_fields__ if name != "name")


def _check_default_groups(groups: Mapping) -> None:
    for group, keys in groups.items():
        for key in keys if isinstance(keys, Mapping) else ():
            if key not in STAGE_KEYS:
                raise MatrixError(f"stage_defaults.{group}.{key}",
                                  f"unknown key (known: {', '.join(STAGE_KEYS)})")


def _with_defaults(name: Any, spec: Any, groups: Mapping) -> Any:
    if not isinstance(spec, Mapping) or "defaults" not in spec:
        return spec
    group = spec["defaults"]
    if not isinstance(group, str) or not isinstance(groups.get(group), Mapping):
        raise MatrixError(f"stages.{name}.defaults", f"expected a key of stage_defaults (known: "
                          f"{', '.join(map(str, groups)) or 'none'}), got {show(group)}")
    own = {key: value for key, value in spec.items() if key != "defaults"}
    return {**groups[group], **own}


# ---------------------------------------------------------------------------- cross-references


def _check_axis_pins(axes: Mapping) -> None:
    """The package that names the axis is pinned at the value's version: ort "1.32.0" installs
    onnxruntime==1.32.0, never another release under that name."""
    for axis, names in AXIS_PACKAGES.items():
        for value, props in axes[axis].items():
            where = f"{AXES[axis]}.{value}.packages"
            if props["packages"] is None:
                raise MatrixError(where, f"missing (expected a pin {names[0]}=={value})")
            pins = dict(map(_pin_parts, props["packages"]))
            named = [name for name in names if name in pins]
            if not named:
                raise MatrixError(where, f"expected a pin of {' or '.join(names)} (the package "
                                  f"this axis names) at {value}")
            for name in named:
                if pins[name] != Version(value):
                    raise MatrixError(where, f"{name}=={pins[name]} does not match the key "
                                      f"{value!r}: the pin must carry the key's version")
    for value, props in axes["ort"].items():
        _check_gpu_pins(value, props["gpu_packages"])


def _check_gpu_pins(value: str, gpu_packages: Any) -> None:
    """ort "1.31.1" gpu_packages pin onnxruntime-gpu==1.31.1: the GPU build of the same release."""
    if gpu_packages is None:
        return
    where = f"ort.{value}.gpu_packages"
    pins = dict(map(_pin_parts, gpu_packages))
    if "onnxruntime-gpu" not in pins:
        raise MatrixError(where, f"expected a pin onnxruntime-gpu=={value}, got "
                          f"{', '.join(gpu_packages) or 'none'}")
    if pins["onnxruntime-gpu"] != Version(value):
        raise MatrixError(where, f"onnxruntime-gpu=={pins['onnxruntime-gpu']} does not match the "
                          f"key {value!r}: the pin must carry the key's version")


def _check_setting(name: str, value: Any, where: str, python: Mapping) -> None:
    """A setting named like a `python:` pin overrides that pin: it is a version (or null)."""
    if name in python and value is not None:
        parse_version(value, where)


def _check_rules(rules: tuple[Rule, ...], axes: Mapping, settings: Mapping,
                 python: Mapping) -> None:
    for index, rule in enumerate(rules):
        where = f"rules.{rule.id}"
        if rule.id in (earlier.id for earlier in rules[:index]):
            raise MatrixError("rules", f"duplicate rule id {rule.id!r}")
        for key in ("when", "require"):
            for number, condition in enumerate(getattr(rule, key)):
                operand = condition.operand or ""
                for attr in (condition.attr, operand[1:] if operand.startswith("$") else ""):
                    if attr:
                        _check_attr(attr, condition.op, f"{where}.{key}[{number}]", axes)
        for name, value in rule.set.items():
            if name not in settings:
                raise MatrixError(f"{where}.set.{name}",
                                  f"unknown setting (settings: {', '.join(settings)})")
            _check_setting(name, value, f"{where}.set.{name}", python)


def _check_attr(attr: str, op: str, where: str, axes: Mapping) -> None:
    """AXIS, AXIS.PROPERTY or AXIS.PROPERTY.major; an order comparison reads versions only,
    checked for every value here, so a rule never meets a value it cannot compare."""
    axis, *props = attr.split(".")
    if axis not in axes:
        raise MatrixError(where, f"{attr}: unknown axis {axis!r} (axes: {', '.join(AXES)})")
    props = props[:-1] if props and props[-1] == "major" else props
    if len(props) > 1:
        raise MatrixError(where, f"{attr}: expected AXIS, AXIS.PROPERTY or AXIS.PROPERTY.major")
    if props and not any(props[0] in values for values in axes[axis].values()):
        raise MatrixError(where, f"{attr}: no {AXES[axis]} value has a property {props[0]!r}")
    for value in axes[axis] if op in ORDER_OPS else ():
        found = resolve(axes, {axis: value}, attr)
        if found is not None and not is_version(found):
            raise MatrixError(where, f"{attr} is {show(found)} for {AXES[axis]}.{value}: "
                              f"{op} compares versions only")


def resolve(axes: Mapping, values: Mapping[str, str], attr: str) -> Any:
    """A condition's ATTR in a cell: the axis value, a property of it, or its `.major`."""
    axis, *props = attr.split(".")
    want_major = bool(props) and props[-1] == "major"
    props = props[:-1] if want_major else props
    value: Any = axes[axis][values[axis]].get(props[0]) if props else values[axis]
    if isinstance(value, list):
        return [str(v) for v in value]
    return major(value) if want_major else (None if value is None else str(value))


def _check_stages(stages: Mapping[str, Stage], settings: Mapping, tools: Mapping) -> None:
    earlier: list[str] = []
    for name, stage in stages.items():
        where = f"stages.{name}"
        for index, before in enumerate(stage.after):
            if before not in earlier:
                raise MatrixError(f"{where}.after[{index}]", f"{before!r}: expected an earlier "
                                  f"stage (earlier: {', '.join(earlier) or 'none'})")
        for index, tool in enumerate(stage.tools):
            if tool not in tools:
                raise MatrixError(f"{where}.tools[{index}]", f"{tool!r}: not a key of tools: "
                                  f"(known: {', '.join(tools)})")
        _check_placeholders(stage, where, settings)
        earlier.append(name)


def _check_placeholders(stage: Stage, where: str, settings: Mapping) -> None:
    outs = {f"{before.replace('-', '_')}_out" for before in stage.after}
    known = {"out", *AXES, *settings, *outs, *(f"{out}s" for out in outs if stage.gather)}
    for field in sorted(stage.placeholders()):
        if field not in known:
            raise MatrixError(f"{where}.run", f"{{{field}}}: unknown placeholder (known: "
                              f"{', '.join(sorted(known))})")
        if field in AXES and field not in stage.depends:
            raise MatrixError(f"{where}.depends", f"the command reads {{{field}}}: list {field} "
                              "in depends (it is part of the result's key)")


def _check_profiles(profiles: Mapping[str, Profile], axes: Mapping,
                    stages: Mapping[str, Stage]) -> None:
    for name, profile in profiles.items():
        for axis, values in profile.values.items():
            for value in values:
                if value not in axes[axis]:
                    raise MatrixError(f"profiles.{name}.{axis}", f"{value}: unknown {axis} value "
                                      f"(known: {', '.join(axes[axis])})")
        for variant_name, variant in (profile.variants or {}).items():
            for axis in ("toolkit", "torch", "arch_list"):
                for value in getattr(variant, axis) or ():
                    if value not in axes[axis]:
                        raise MatrixError(f"profiles.{name}.variants.{variant_name}.{axis}",
                                          f"{value}: unknown {axis} value (known: "
                                          f"{', '.join(axes[axis])})")
        for index, stage in enumerate(profile.stages or ()):
            where = f"profiles.{name}.stages[{index}]"
            if stage not in stages:
                raise MatrixError(where, f"{stage!r}: unknown stage (known: {', '.join(stages)})")
            missing = [before for before in stages[stage].after if before not in profile.stages]
            if missing:
                raise MatrixError(where, f"{stage} runs after {missing[0]}: select {missing[0]} "
                                  "too")
        for value in profile.values["ort"] if profile.gpu else ():
            if axes["ort"][value]["gpu_packages"] is None:
                raise MatrixError(f"profiles.{name}.ort", f"{value}: a gpu profile installs "
                                  f"onnxruntime-gpu, but ort.{value} has no gpu_packages (add "
                                  f"gpu_packages: [onnxruntime-gpu=={value}] where PyPI has that "
                                  "release, or choose a release that has one)")
    total = sum(math.prod(map(len, p.values.values())) for p in profiles.values())
    if total > MAX_COMBINATIONS:
        raise MatrixError("profiles", f"{total} axis-value combinations in all: more than the "
                          f"{MAX_COMBINATIONS} a matrix may expand to")


def _check_suite(suite: Any, axes: Mapping) -> None:
    if suite.ort not in axes["ort"]:
        raise MatrixError("suite.ort", f"{suite.ort!r}: unknown ort value")


# ------------------------------------------------------------------------ one line per problem


def validate(data: Any) -> MatrixFile:
    """matrix.yaml's data as a MatrixFile; MatrixError naming the first problem."""
    if not isinstance(data, Mapping):
        raise MatrixError("", f"expected a mapping of sections, got {type(data).__name__}")
    try:
        return MatrixFile.model_validate(data)
    except ValidationError as exc:
        raise _one_error(exc.errors(include_url=False)[0], data) from None


def _one_error(error: Mapping, data: Mapping) -> MatrixError:
    ctx = error.get("ctx") or {}
    if isinstance(ctx.get("error"), MatrixError):     # raised where the whole path was known
        return ctx["error"]
    loc = [part for part in error["loc"] if part != "[key]"]
    if ctx.get("at") is not None:
        loc.append(ctx["at"])
    return MatrixError(_where(loc, data), _problem(error, loc))


def _where(loc: list, data: Any) -> str:
    """`stages.unit-ort.after[0]`; a rule by its id once it has one (`rules.old-ort-numpy`)."""
    text, node = "", data
    for part in loc:
        if isinstance(node, list) and isinstance(part, int) and part < len(node):
            rule_id = node[part].get("id") if isinstance(node[part], Mapping) else None
            named = text == "rules" and isinstance(rule_id, str) and rule_id
            text, node = (f"rules.{rule_id}" if named else f"{text}[{part}]"), node[part]
        else:
            text = f"{text}.{part}" if text else str(part)
            node = node.get(part) if isinstance(node, Mapping) else None
    return text


def _problem(error: Mapping, loc: list) -> str:
    kind = error["type"]
    if kind == "value_error":   # our validators' own ValueError, as raised
        return str(error["ctx"]["error"])
    if kind == "matrix":
        return error["msg"]
    fields, field, target = _declared_at(loc)
    if kind in ("extra_forbidden", "unexpected_keyword_argument"):
        return f"{fields.unknown} (known: {', '.join(_keys(fields))})"
    if kind == "missing":
        return "missing section" if len(loc) == 1 else "missing" + \
            (f" (expected {field.description})" if field and field.description else "")
    if kind == "literal_error":
        what = f"one of {', '.join(sorted(str(v) for v in typing.get_args(target) if v))}"
    elif field is not None and field.description:
        what = field.description
    elif kind in ("model_type", "dataclass_type"):
        what = f"a mapping with the keys {', '.join(_keys(target))}"
    else:
        what = TYPE_WORDS.get(kind, error["msg"].removeprefix("Input should be "))
    return f"expected {what}, got {show(error['input'])}"


def _keys(declared: Any) -> list[str]:
    return [name for name in declared.__pydantic_fields__ if name != "name"]   # name: the key


def _declared_at(loc: list) -> tuple[Any, Any, Any]:
    """The model and the field an error location points into, and the declared type there (the
    field only where the location is the field itself, not an item inside it)."""
    declared, field, annotation = MatrixFile, None, MatrixFile
    for part in loc:
        annotation = _unwrap(annotation)
        origin = typing.get_origin(annotation)
        if hasattr(annotation, "__pydantic_fields__"):
            declared, field = annotation, annotation.__pydantic_fields__.get(part)
            if field is None:
                break
            annotation = field.annotation
        elif origin in (dict, tuple, list):
            field, annotation = None, typing.get_args(annotation)[1 if origin is dict else 0]
        else:
            break
    return declared, field, _unwrap(annotation)


def _unwrap(annotation: Any) -> Any:
    """X from Annotated[X, ...] and Optional[X]."""
    while typing.get_origin(annotation) in (Annotated, typing.Union):
        annotation = next(arg for arg in typing.get_args(annotation) if arg is not type(None))
    return annotation
