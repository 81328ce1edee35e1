"""The declared schema of matrix.yaml (pydantic): every section, field by field.

Unknown keys are refused; versions are canonical PEP 440 text ("1.20", never the number 1.2),
packages exact `name==version` pins; conditions, arch lists and placeholders must be readable.
The model validators check what refers to something else: rules to axes and their properties,
stages to earlier stages, settings and `tools:`, profiles to axis values and stages (closed under
`after`), the suite to values and profiles.

ci/model/values.py declares the values, ci/model/checks.py the cross-references, and
ci/model/validate.py turns a ValidationError into one line.
"""
# ruff: noqa: UP045  (pydantic evaluates these annotations at run time: `X | None` needs 3.10)
from __future__ import annotations

import re
import string
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal, Optional

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    create_model,
    field_validator,
    model_validator,
)
from pydantic.dataclasses import dataclass as checked_dataclass

from ci.model import checks
from ci.model.errors import MatrixError, refuse, show
from ci.model.toolkit_spec import SpecError, ToolkitSpec, parse_spec
from ci.model.values import (
    AXES,
    ArchList,
    Axis,
    AxisValue,
    AxisValues,
    Conditions,
    Opset,
    Pins,
    Reason,
    Scalar,
    SettingName,
    VersionText,
    checked,
    parse_pin,
    placeholders,
)

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
# The properties of an axis value (a toolkit's: ci/model/toolkit_spec.py parse_spec).
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
DebianPackageName = Annotated[str, checked(lambda value: isinstance(value, str) and DEBIAN_PACKAGE.fullmatch(
    value), "a Debian package name (no version: docker/apt.lock holds the versions)")]
ImageByDigest = Annotated[str, checked(lambda value: isinstance(value, str) and IMAGE_BY_DIGEST.fullmatch(
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
            raise refuse("every rule says why it exists", at="why")
        if not {"require", "set"} & self.model_fields_set:
            raise refuse("expected require or set (a rule with neither does nothing)")
        return self


def _readable_placeholders(texts: tuple[str, ...] | dict[str, str]) -> Any:
    for at, text in (texts.items() if isinstance(texts, dict) else enumerate(texts)):
        try:
            list(string.Formatter().parse(text))
        except ValueError as exc:         # an unclosed `{out`
            raise refuse(f"{text!r}: {exc}", at=at) from None
    return texts


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
    depends: tuple[Axis, ...] = Field(default=(), description="a list of axes")
    after: tuple[StrictStr, ...] = Field(default=(), description="a list of earlier stages")
    needs: tuple[Literal["gpu", "tensorrt-runtime"], ...] = Field(default=(), description="a list")
    cache: Literal["inputs", "run"] = "inputs"
    run: Annotated[tuple[StrictStr, ...], AfterValidator(_readable_placeholders)] = Field(
        default=(), description="an argv list [script.py, args...]")
    env: Annotated[dict[StrictStr, StrictStr], AfterValidator(_readable_placeholders)] = Field(
        default_factory=dict, description="NAME: text")
    key: Literal["full", "own"] = "full"
    gather: Literal[Axis, None] = None    # runs once the cells differing only in it are done
    slow: StrictBool = False              # skipped with --skip-slow
    tests: Optional[StrictStr] = None     # pytest: the folder (default packages/<package>/tests)
    tools: tuple[StrictStr, ...] = Field(default=(), description="a list of tools: names")
    serial: StrictBool = False            # pytest: not under pytest-xdist

    @property
    def tests_dir(self) -> str:
        return self.tests or f"packages/{self.package}/tests"

    def placeholders(self) -> set[str]:
        return placeholders([*self.run, *self.env.values()])

    @model_validator(mode="after")
    def _what_its_kind_needs(self) -> Stage:
        tests = self.tests
        if tests is not None and self.kind != "pytest":
            raise refuse(f"only a pytest stage has tests (kind: {self.kind})", at="tests")
        if tests is not None and (not tests or tests[0] == "/" or ".." in tests.split("/")):
            raise refuse("expected a folder relative to the repository without '..', got "
                          f"{show(tests)}", at="tests")
        if self.kind in ("pytest", "script") and self.venv is None:
            raise refuse(f"a {self.kind} stage runs in a venv: torch or ort", at="venv")
        needed = self.kind == "build" or (self.kind == "pytest" and tests is None)
        if (needed or self.package is not None) and (not self.package or "/" in self.package):
            raise refuse(f"expected a folder name under packages/, got {show(self.package)}",
                          at="package")
        if self.kind == "script" and not self.run:
            raise refuse("expected run: [script.py, args...] (text)", at="run")
        if self.gather and (self.gather in self.depends or self.key != "own"):
            raise refuse(f"a stage gathering {self.gather} has key: own and does not depend "
                          f"on {self.gather}", at="gather")
        return self


def _stage_defaults_model() -> type[Section]:
    """A `stage_defaults:` group: any of a stage's keys, each of the stage's type, checked where it
    is written whether or not a stage uses the group (which keys a stage needs, the stage says)."""
    fields = {name: (Optional[_declared_type(field)], Field(None, description=field.description))
              for name, field in Stage.__pydantic_fields__.items() if name != "name"}  # type: ignore[attr-defined]  # set by the pydantic dataclass
    return _section("StageDefaults", **fields)


def _declared_type(field: Any) -> Any:
    """A field's type with its validators and constraints (pydantic keeps them apart)."""
    return Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation


StageDefaults = _stage_defaults_model()


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
    skip: Optional[Reason] = None   # why the variant is declared but not built


def _variant_names(variants: dict | None) -> dict | None:
    if variants is None:
        return None
    for name in variants:
        if not VARIANT_NAME.fullmatch(name):
            raise refuse(f"{name!r}: a variant name is its wheels' local version label: "
                          "lower-case letters and digits, e.g. cu130")
    defaults = [name for name, variant in variants.items() if variant.default]
    if len(defaults) != 1:
        raise refuse(f"expected exactly one variant with default: true, got {len(defaults)}"
                      + (f" ({', '.join(defaults)})" if defaults else ""))
    if variants[defaults[0]].skip:
        raise refuse(f"the default variant {defaults[0]} cannot be skipped")
    return variants


class OldGlibc(Section):
    """Where `nox -s release` runs the default variant on an older glibc (ci/release/old_glibc.py)."""

    debian: StrictStr = Field(description="a Debian release the mirror serves (debootstrapped)")
    packages: tuple[StrictStr, ...] = Field(min_length=1, description="pins for its python3")


class Exclusion(Section):
    """A combination a profile leaves out, as a GitHub Actions matrix's `exclude`: every cell whose
    values match each axis it names; `why` is what --list and the report say."""

    unknown: ClassVar[str] = "unknown axis or key"
    why: Reason
    toolkit: Optional[AxisValue] = None
    torch: Optional[AxisValue] = None
    arch_list: Optional[AxisValue] = None
    opset: Optional[Opset] = None
    ort: Optional[AxisValue] = None
    tensorrt: Optional[AxisValue] = None

    @model_validator(mode="after")
    def _names_an_axis(self) -> Exclusion:
        if not self.values:
            raise refuse(f"name at least one axis ({', '.join(AXES)}) besides why")
        return self

    @property
    def values(self) -> dict[str, str]:
        """axis -> value, for the axes it names"""
        return {axis: str(getattr(self, axis)) for axis in AXES if getattr(self, axis) is not None}


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
    exclude: tuple[Exclusion, ...] = Field((), description="a list of combinations to leave out")
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
            if value in (values or ())[:index]:
                raise refuse(f"duplicate value {value!r}")
        return values

    @property
    def values(self) -> dict[str, tuple[str, ...]]:
        """axis -> values"""
        return {axis: tuple(map(str, getattr(self, axis))) for axis in AXES}


def _values_of(kind: Any, what: str) -> Any:
    return Annotated[kind, Field(min_length=1, description=f"a non-empty mapping of {what}")]


class MatrixFile(Section):
    unknown: ClassVar[str] = "unknown section"
    sources: Optional[Sources] = None  # type: ignore[valid-type]  # a create_model section
    tools: dict[StrictStr, VersionText] = Field({}, description='a mapping name: "version"')
    python: dict[StrictStr, VersionText] = Field({}, description='a mapping name: "version"')
    # _values_of() and the _section() models are made at run time (create_model): values, not
    # types, to mypy
    toolkits: _values_of(dict[StrictStr, Any], "toolkit ids to their specs")  # type: ignore[valid-type]
    torch: _values_of(dict[VersionText, TorchRelease], "torch releases")  # type: ignore[valid-type]
    arch_lists: _values_of(dict[ArchList, ArchListProps], "arch lists")  # type: ignore[valid-type]
    opsets: _values_of(dict[Opset, OpsetProps], "opsets")  # type: ignore[valid-type]
    ort: _values_of(dict[VersionText, OrtRelease], "ONNX Runtime releases")  # type: ignore[valid-type]
    tensorrt: _values_of(dict[VersionText, TensorrtRelease], "TensorRT releases")  # type: ignore[valid-type]
    settings: dict[SettingName, Scalar] = Field(description="a mapping of setting: default")
    rules: tuple[Rule, ...] = Field(description="a list of rules")
    stage_defaults: dict[StrictStr, StageDefaults] = Field(  # type: ignore[valid-type]  # a create_model section
        {}, description="a mapping of names to stage keys")
    stages: dict[StrictStr, Stage] = Field(description="a mapping of stage names")
    profiles: dict[StrictStr, Profile] = Field(description="a mapping of profile names")
    suite: Suite  # type: ignore[valid-type]  # a create_model section
    container: Optional[Container] = None  # type: ignore[valid-type]  # a create_model section

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
    def _toolkit_specs(cls, raw: dict[str, Any]) -> dict[str, ToolkitSpec]:
        """A toolkit is a ToolkitSpec (ci/model/toolkit_spec.py); its pins are exact pins."""
        specs = {}
        for tid, spec in raw.items():
            try:
                specs[tid] = parse_spec(tid, spec)
            except SpecError as exc:
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
        checks.check_all(self)
        return self


# ------------------------------------------------------------------------------ stage defaults


def _with_defaults(name: Any, spec: Any, groups: Mapping) -> Any:
    """The stage with the keys of its group it does not set; a group that is not a mapping is left
    to the check of stage_defaults, which names it where it is written."""
    if not isinstance(spec, Mapping) or "defaults" not in spec:
        return spec
    group = spec["defaults"]
    if isinstance(group, str) and group in groups and not isinstance(groups[group], Mapping):
        return spec
    if not isinstance(group, str) or group not in groups:
        raise MatrixError(f"stages.{name}.defaults", f"expected a key of stage_defaults (known: "
                          f"{', '.join(map(str, groups)) or 'none'}), got {show(group)}")
    own = {key: value for key, value in spec.items() if key != "defaults"}
    return {**groups[group], **own}
