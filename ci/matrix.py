"""Load, validate and expand matrix.yaml: axes, rules as data, stages and profiles.

Every problem is ONE line, `matrix.yaml: <key path>: <problem>`, raised as MatrixError before
anything runs.

matrix.yaml is outside input: the reader bounds its size (MAX_BYTES), nesting (MAX_DEPTH) and the
combinations its profiles expand to (MAX_COMBINATIONS), refuses YAML anchors, aliases and tags,
and accepts versions only as PEP 440 versions and packages only as exact `name==version` pins —
so no value reaches pip or a rule that the rule cannot compare.

    python -m ci.matrix check                 # validate (exit 2 with the line on a problem)
    python -m ci.matrix cells [--profile host] [--excluded]
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import itertools
import math
import re
import stat
import string
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

REPO = Path(__file__).resolve().parent.parent
MATRIX = REPO / "matrix.yaml"

# axis name (used in rules, profiles, filters) -> the section holding its values
AXES = {"toolkit": "toolkits", "torch": "torch", "arch_list": "arch_lists", "opset": "opsets",
        "ort": "ort", "tensorrt": "tensorrt"}
SECTIONS = {"sources", "tools", "python", "settings", "rules", "stages", "profiles", "suite", "container",
            *AXES.values()}
RULE_KEYS = {"id", "why", "when", "require", "set"}
STAGE_KEYS = {"kind", "package", "venv", "cuda", "depends", "after", "needs", "cache", "run", "env",
              "key", "gather"}
KEY_MODES = {"full", "own"}
STAGE_KINDS = {"build", "pytest", "script", "wheel"}
VENVS = {"torch", "ort"}
CUDA_MODES = {"always", "never", "torch"}
NEEDS = {"gpu", "tensorrt-runtime"}
CACHES = {"inputs", "run"}
PROFILE_KEYS = {"description", "runs_on", *AXES}
SUITE_KEYS = {"torch", "ort", "oldest_ort_of"}
# The properties an axis value may have and what each holds (toolkits: ci/toolkits.py checks them):
# version, version-or-null, a list of versions, or a list of exact pins `name==version`.
VALUE_PROPS = {"torch": {"cuda": "version-or-null", "packages": "pins"},
               "arch_lists": {"min_cuda": "version"}, "opsets": {"min_ort": "version"},
               "ort": {"packages": "pins"}, "tensorrt": {"cuda_majors": "versions"}}
# The package whose pin names an axis value: its version must be the value (the key).
AXIS_PACKAGES = {"torch": ("torch",), "ort": ("onnxruntime", "onnxruntime-gpu")}
VERSION_AXES = {"torch", "ort", "tensorrt"}
ORDER_OPS = {">=", "<=", ">", "<"}
ARCH_LIST = re.compile(r"\d+\.\d+[af]?(\+PTX)?(;\d+\.\d+[af]?(\+PTX)?)*")
SETTING_NAME = re.compile(r"[A-Za-z_]\w*")

# Bounds on the input (the real file: ~12 KB, 5 levels deep, 432 combinations). PyYAML's pure
# Python parser reads ~100 KB/s on a busy 2-core machine: 256 KiB keeps a refusal within seconds.
MAX_BYTES = 256 * 1024
MAX_DEPTH = 32
MAX_COMBINATIONS = 50_000        # axis-value combinations over all profiles
MAX_SHOWN = 300                  # characters of an input value quoted in a message
CONDITION = re.compile(r"^(?P<attr>[A-Za-z_][\w.]*)\s+(?:(?P<op>==|!=|>=|<=|>|<|in)\s+"
                       r"(?P<operand>\S+)|(?P<unary>set|unset))$")


class MatrixError(ValueError):
    """A problem in matrix.yaml; str() is the one line to print."""

    def __init__(self, where: str, problem: str, file: str = "matrix.yaml"):
        where, problem = _one_line(where, MAX_SHOWN), _one_line(problem, 3 * MAX_SHOWN)
        super().__init__(f"{file}: {where}: {problem}" if where else f"{file}: {problem}")


def _one_line(text: str, limit: int) -> str:
    """Input quoted in a message may hold newlines, control characters or a megabyte of text."""
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text)[:limit + 1])
    return text if len(text) <= limit else text[:limit] + "..."


# --------------------------------------------------------------------------------------- model


@dataclasses.dataclass(frozen=True)
class Condition:
    attr: str
    op: str                 # == != >= <= > < in set unset
    operand: str | None     # literal text, or "$attr"
    text: str


@dataclasses.dataclass(frozen=True)
class Rule:
    id: str
    why: str
    when: tuple[Condition, ...]
    require: tuple[Condition, ...]
    set: Mapping[str, Any]


@dataclasses.dataclass(frozen=True)
class Stage:
    name: str
    kind: str
    package: str | None
    venv: str | None
    cuda: str
    depends: tuple[str, ...]
    after: tuple[str, ...]
    needs: tuple[str, ...]
    cache: str
    run: tuple[str, ...]
    env: Mapping[str, str]
    key: str = "full"
    gather: str | None = None     # an axis: runs once the cells differing only in it are done

    def placeholders(self) -> set[str]:
        texts = [*self.run, *self.env.values()]
        return {field for text in texts for _, field, _, _ in string.Formatter().parse(text)
                if field}


@dataclasses.dataclass(frozen=True)
class Profile:
    name: str
    description: str
    runs_on: tuple[str, ...]
    values: Mapping[str, tuple[str, ...]]   # axis -> values


@dataclasses.dataclass(frozen=True)
class Cell:
    values: Mapping[str, str]      # axis -> value, in AXES order
    settings: Mapping[str, Any]

    @property
    def id(self) -> str:
        return " ".join(f"{axis}={self.values[axis]}" for axis in AXES)

    def matches(self, filters: Mapping[str, set[str]]) -> bool:
        return all(self.values[axis] in wanted for axis, wanted in filters.items())


@dataclasses.dataclass(frozen=True)
class Excluded:
    values: Mapping[str, str]
    rule: str
    why: str
    condition: str

    @property
    def id(self) -> str:
        return " ".join(f"{axis}={self.values[axis]}" for axis in AXES)


@dataclasses.dataclass(frozen=True)
class Matrix:
    path: Path
    data: Mapping[str, Any]
    axes: Mapping[str, Mapping[str, Mapping[str, Any]]]    # axis -> value -> properties
    settings: Mapping[str, Any]
    rules: tuple[Rule, ...]
    stages: Mapping[str, Stage]                             # in run order
    profiles: Mapping[str, Profile]

    @property
    def tools(self) -> Mapping[str, str]:
        return self.data.get("tools", {})

    @property
    def python(self) -> Mapping[str, str]:
        return self.data.get("python", {})

    @property
    def suite(self) -> Mapping[str, str]:
        return self.data["suite"]

    def props(self, axis: str, value: str) -> Mapping[str, Any]:
        return self.axes[axis][value]

    def oldest(self, axis: str, profile: str) -> str:
        return min(self.profiles[profile].values[axis], key=version_key)

    def newest(self, axis: str, profile: str) -> str:
        return max(self.profiles[profile].values[axis], key=version_key)


# ------------------------------------------------------------------------------------ YAML input


@functools.cache
def _yaml_loader():
    import yaml
    from yaml.events import AliasEvent
    from yaml.nodes import ScalarNode

    class Loader(yaml.SafeLoader):
        """SafeLoader for outside input: no anchors, aliases or tags (billion laughs), nesting at
        most MAX_DEPTH (checked while composing, before Python's recursion limit), keys are text
        or numbers, no duplicate keys (PyYAML silently keeps the last)."""

        def __init__(self, stream):
            super().__init__(stream)
            self.depth = 0

        def compose_node(self, parent, index):
            event = self.peek_event()
            where = _at(event.start_mark)
            if isinstance(event, AliasEvent) or event.anchor is not None:
                raise MatrixError(where, "YAML anchors and aliases (&name, *name) are not "
                                  "allowed: write the value out")
            if getattr(event, "tag", None) is not None:
                raise MatrixError(where, f"YAML tags ({event.tag}) are not allowed")
            if self.depth >= MAX_DEPTH:
                raise MatrixError(where, f"nested deeper than {MAX_DEPTH} levels")
            self.depth += 1
            try:
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

    def construct_mapping(loader, node, deep=False):
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            line = key_node.start_mark.line + 1
            if not isinstance(key_node, ScalarNode):
                raise MatrixError(_at(key_node.start_mark), "a key must be text or a number, "
                                  f"not a {key_node.id} (`? [a, b]`)")
            key = loader.construct_object(key_node, deep=True)
            if isinstance(key, bool) or not isinstance(key, (str, int, float)):
                raise MatrixError(_at(key_node.start_mark), f"key {key_node.value!r}: YAML reads "
                                  f"it as {type(key).__name__} {key!r}: quote it")
            if key in seen:
                raise MatrixError(f"line {line}", f"duplicate key {key!r} (first on line {seen[key]})")
            seen[key] = line
        return yaml.SafeLoader.construct_mapping(loader, node, deep)

    def number(construct):
        def construct_number(loader, node):
            # YAML 1.1 reads 1:30 as base 60: quadratic in its length, and never meant here.
            if ":" in node.value:
                raise MatrixError(_at(node.start_mark), f"{node.value!r}: YAML reads it as a "
                                  "base-60 number: quote it")
            try:
                return construct(loader, node)
            except ValueError as exc:      # e.g. more digits than int() converts
                raise MatrixError(_at(node.start_mark), f"unusable number: {exc}") from None
        return construct_number

    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)
    Loader.add_constructor("tag:yaml.org,2002:int", number(yaml.SafeLoader.construct_yaml_int))
    Loader.add_constructor("tag:yaml.org,2002:float", number(yaml.SafeLoader.construct_yaml_float))
    # No dates in matrix.yaml: 2001-13-01 stays text instead of a ValueError from datetime.
    Loader.yaml_implicit_resolvers = {
        first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
    return Loader


def _at(mark) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}"


def _check_size(size: int) -> None:
    if size > MAX_BYTES:
        raise MatrixError("", f"more than the {MAX_BYTES // 1024} KiB a matrix file may have")


def decode(data: bytes) -> str:
    """matrix.yaml's bytes as text: at most MAX_BYTES, UTF-8."""
    _check_size(len(data))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - data.rfind(b"\n", 0, exc.start)
        where = f"line {line}, column {column}"
        raise MatrixError(where, f"not UTF-8 text (byte 0x{data[exc.start]:02x})") from None


def read_yaml(text: str) -> Any:
    import yaml

    _check_size(len(text.encode("utf-8", "surrogatepass")))
    try:
        return yaml.load(text, Loader=_yaml_loader())
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = _at(mark) if mark else "YAML"
        raise MatrixError(where, f"YAML syntax error: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise MatrixError("", f"YAML syntax error: {str(exc).splitlines()[0]}") from None


# ------------------------------------------------------------------------------------- versions


def version_key(text: Any) -> Version:
    """The order of versions (values are checked to be versions when the file is read)."""
    return Version(str(text))


def parse_version(text: Any, where: str) -> Version:
    """A version as pip writes it (PEP 440, canonical): "1.17.3"; not "v1.17", "1.17 ", "1.17; x"."""
    version = None
    if isinstance(text, (str, int)) and not isinstance(text, bool):
        try:
            version = Version(str(text))
        except InvalidVersion:
            pass
    if version is None or str(version) != str(text):
        raise MatrixError(where, f"expected a version such as \"1.17.3\", got {_show(text)}")
    return version


def parse_pin(text: Any, where: str) -> tuple[str, Version]:
    """`name==version` exactly (what pip is handed): no options, markers, URLs, extras or ranges.
    Returns the canonical name and the version."""
    requirement = None
    if isinstance(text, str):
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            pass
    specifiers = list(requirement.specifier) if requirement else []
    if (requirement is None or requirement.url or requirement.marker or requirement.extras
            or len(specifiers) != 1 or specifiers[0].operator != "=="
            or not _is_version(specifiers[0].version)
            or text != f"{requirement.name}=={specifiers[0].version}"):
        raise MatrixError(where, "expected an exact pin name==version (no options, markers, URLs, "
                          f"extras or spaces), got {_show(text)}")
    return canonicalize_name(requirement.name), parse_version(specifiers[0].version, where)


def major(value: Any) -> str | None:
    return None if value is None else str(value).split(".")[0]


# ------------------------------------------------------------------------------------ validation


def load(path: Path = MATRIX) -> Matrix:
    """Read and validate matrix.yaml (all profiles expanded once); raise MatrixError."""
    path = Path(path)
    try:
        return from_bytes(_read_bounded(path), path)
    except MatrixError as exc:
        if path.name != "matrix.yaml":
            raise MatrixError("", str(exc).removeprefix("matrix.yaml: "), path.name) from None
        raise


def from_bytes(data: bytes, path: Path = MATRIX) -> Matrix:
    """The validated Matrix of a matrix file's bytes; raise MatrixError."""
    return parse(read_yaml(decode(data)), path)


def _read_bounded(path: Path) -> bytes:
    """At most MAX_BYTES + 1 bytes; a FIFO or device is refused unopened (it may never end)."""
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            raise MatrixError("", "cannot read: not a regular file")
        with path.open("rb") as file:
            return file.read(MAX_BYTES + 1)
    except OSError as exc:
        raise MatrixError("", f"cannot read: {exc.strerror}") from None


def parse(data: Any, path: Path = MATRIX) -> Matrix:
    if not isinstance(data, Mapping):
        raise MatrixError("", f"expected a mapping of sections, got {type(data).__name__}")
    unknown = sorted(set(map(str, data)) - SECTIONS)
    if unknown:
        raise MatrixError(unknown[0], f"unknown section (known: {', '.join(sorted(SECTIONS))})")
    for section in ("settings", "rules", "stages", "profiles", "suite", *AXES.values()):
        if section not in data:
            raise MatrixError(section, "missing section")
    _check_keys(data, "")
    _check_pins("tools", data.get("tools", {}))
    pinned = _check_pins("python", data.get("python", {}))
    axes = {axis: _parse_axis(axis, data[section]) for axis, section in AXES.items()}
    _check_toolkits(data["toolkits"])
    settings = _parse_settings(data["settings"], pinned)
    rules = tuple(_parse_rule(i, raw, axes, settings, pinned) for i, raw in
                  enumerate(_expect(data["rules"], list, "rules", "a list of rules")))
    _unique([rule.id for rule in rules], "rules", "rule id")
    stages = _parse_stages(data["stages"], settings)
    profiles = {str(name): _parse_profile(str(name), raw, axes)
                for name, raw in _expect(data["profiles"], Mapping, "profiles",
                                         "a mapping of profile names").items()}
    _check_combinations(profiles)
    matrix = Matrix(path, data, axes, settings, rules, stages, profiles)
    _check_suite(matrix)
    for name in profiles:
        check_profile(matrix, name)
    return matrix


def _check_keys(node: Any, where: str) -> None:
    """Every key is text, but opset numbers: YAML reads 1.20 or 13 as numbers, and a number
    among text keys breaks every sorted() and lookup that follows."""
    items = node.items() if isinstance(node, Mapping) else \
        enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        inside = f"{where}.{key}" if where else str(key)
        if isinstance(node, Mapping) and not isinstance(key, str) and where != "opsets":
            if isinstance(key, float):
                raise MatrixError(inside, f"YAML reads {key} as a number: write it quoted, as a "
                                  "string (\"1.20\" is not 1.2)")
            raise MatrixError(inside, f"expected a text key, got {_show(key)}: quote it")
        _check_keys(value, f"{where}[{key}]" if isinstance(node, list) else inside)


def _expect(value: Any, kind: type, where: str, what: str) -> Any:
    if not isinstance(value, kind):
        raise MatrixError(where, f"expected {what}, got {_show(value)}")
    return value


def _show(value: Any) -> str:
    return f"{type(value).__name__} {value!r}" if not isinstance(value, str) else repr(value)


def _unique(names: list[str], where: str, what: str) -> None:
    seen = set()
    for name in names:
        if name in seen:
            raise MatrixError(where, f"duplicate {what} {name!r}")
        seen.add(name)


def _check_pins(section: str, pins: Any) -> set[str]:
    """`name: "version"` pins (tools, python); returns the names."""
    names: dict[str, str] = {}
    for name, version in _expect(pins, Mapping, section, "a mapping name: \"version\"").items():
        where = f"{section}.{name}"
        if not isinstance(name, str) or not isinstance(version, str):
            raise MatrixError(where, f"expected name: \"version\" (quoted), got {_show(version)}")
        parse_version(version, where)
        canonical, _ = parse_pin(f"{name}=={version}", where)
        if canonical in names:
            raise MatrixError(where, f"{name} is pinned twice (also as {names[canonical]})")
        names[canonical] = name
    return set(names.values())


def _pins(items: Any, where: str) -> dict[str, Version]:
    """A list of exact pins, one per package: canonical name -> version."""
    out: dict[str, Version] = {}
    for i, item in enumerate(_expect(items, list, where, "a list of exact pins name==version")):
        name, version = parse_pin(item, f"{where}[{i}]")
        if name in out:
            raise MatrixError(f"{where}[{i}]", f"{name} is pinned twice")
        out[name] = version
    return out


def _is_version(value: Any) -> bool:
    try:
        parse_version(value, "")
    except MatrixError:
        return False
    return True


def _value_name(axis: str, value: Any) -> str:
    section = AXES[axis]
    where = f"{section}.{value}"
    if axis == "opset":
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise MatrixError(where, f"expected an opset number, got {_show(value)}")
        return str(value)
    if isinstance(value, float):
        raise MatrixError(where, f"YAML reads {value} as a number: write it quoted, "
                          "as a string (\"1.20\" is not 1.2)")
    if not isinstance(value, str) or not value:
        raise MatrixError(where, f"expected a quoted string, got {_show(value)}")
    return value


def _check_value_name(axis: str, name: str) -> None:
    where = f"{AXES[axis]}.{name}"
    if axis in VERSION_AXES:
        parse_version(name, where)
    if axis == "arch_list" and not ARCH_LIST.fullmatch(name):
        raise MatrixError(where, f"expected a TORCH_CUDA_ARCH_LIST such as \"8.0;9.0\", got "
                          f"{_show(name)}")


def _check_property(kind: str, value: Any, where: str) -> None:
    if kind == "version" or (kind == "version-or-null" and value is not None):
        parse_version(value, where)
    elif kind == "versions":
        items = _expect(value, list, where, "a list of versions")
        for i, item in enumerate(items):
            parse_version(item, f"{where}[{i}]")
    elif kind == "pins":
        _pins(value, where)


def _check_axis_pin(axis: str, value: str, props: Mapping, where: str) -> None:
    """The package that names the axis is pinned at the value's version: ort "1.32.0" installs
    onnxruntime==1.32.0, never another release under that name."""
    if "packages" not in props:
        raise MatrixError(f"{where}.packages", f"missing (expected a pin "
                          f"{AXIS_PACKAGES[axis][0]}=={value})")
    pins = _pins(props["packages"], f"{where}.packages")
    named = [name for name in AXIS_PACKAGES[axis] if name in pins]
    if not named:
        raise MatrixError(f"{where}.packages", f"expected a pin of {' or '.join(AXIS_PACKAGES[axis])}"
                          f" (the package this axis names) at {value}")
    for name in named:
        if pins[name] != Version(value):
            raise MatrixError(f"{where}.packages", f"{name}=={pins[name]} does not match the key "
                              f"{value!r}: the pin must carry the key's version")


def _parse_axis(axis: str, raw: Any) -> dict[str, Mapping[str, Any]]:
    section = AXES[axis]
    values = _expect(raw, Mapping, section, f"a mapping of {axis} values to their properties")
    if not values:
        raise MatrixError(section, "has no values")
    out = {}
    for value, raw_props in values.items():
        name = _value_name(axis, value)
        _check_value_name(axis, name)
        props = _expect(raw_props if raw_props is not None else {}, Mapping, f"{section}.{name}",
                        "a mapping of properties")
        allowed = VALUE_PROPS.get(section)
        if allowed is not None:
            extra = sorted(map(str, set(props) - set(allowed)))
            if extra:
                raise MatrixError(f"{section}.{name}.{extra[0]}",
                                  f"unknown key (known: {', '.join(sorted(allowed))})")
            for prop, kind in allowed.items():
                if prop in props:
                    _check_property(kind, props[prop], f"{section}.{name}.{prop}")
        if axis in AXIS_PACKAGES:
            _check_axis_pin(axis, name, props, f"{section}.{name}")
        out[name] = props
    return out


def _check_toolkits(raw: Mapping) -> None:
    from ci import toolkits

    for tid, spec in raw.items():
        try:
            parsed = toolkits.parse_spec(str(tid), spec)
        except toolkits.SpecError as exc:
            raise MatrixError(exc.where, exc.problem) from None
        _pins(list(parsed.packages), f"toolkits.{tid}.packages")
        if parsed.cuobjdump:
            parse_pin(parsed.cuobjdump, f"toolkits.{tid}.cuobjdump")


def _parse_settings(raw: Any, pinned: set[str]) -> dict[str, Any]:
    settings = dict(_expect(raw, Mapping, "settings", "a mapping of setting: default"))
    for name, value in settings.items():
        if not isinstance(name, str) or not SETTING_NAME.fullmatch(name):
            raise MatrixError(f"settings.{name}", "expected a setting name (letters, digits, _)")
        _check_setting(name, value, f"settings.{name}", pinned)
    return settings


def _check_setting(name: str, value: Any, where: str, pinned: set[str]) -> None:
    """A setting named like a `python:` pin overrides that pin: it is a version (or null)."""
    if name in pinned and value is not None:
        parse_version(value, where)


def _check_combinations(profiles: Mapping[str, Profile]) -> None:
    total = sum(math.prod(len(p.values[axis]) for axis in AXES) for p in profiles.values())
    if total > MAX_COMBINATIONS:
        raise MatrixError("profiles", f"{total} axis-value combinations in all: more than the "
                          f"{MAX_COMBINATIONS} a matrix may expand to")


# ----------------------------------------------------------------------------------------- rules


def _parse_condition(text: Any, where: str, axes: Mapping, settings: Mapping) -> Condition:
    if not isinstance(text, str):
        raise MatrixError(where, f"expected a condition string like 'ort >= 1.18', got "
                          f"{_show(text)}")
    found = CONDITION.match(text.strip())
    if not found:
        raise MatrixError(where, f"cannot read condition {text!r} (expected 'ATTR OP OPERAND' "
                          "with OP in == != >= <= > < in, or 'ATTR set' / 'ATTR unset')")
    attr, op = found["attr"], found["op"] or found["unary"]
    _check_attr(attr, where, axes)
    operand = found["operand"]
    if operand and operand.startswith("$"):
        _check_attr(operand[1:], where, axes)
    if op in ORDER_OPS:
        _check_comparable(attr, op, where, axes)
        if operand.startswith("$"):
            _check_comparable(operand[1:], op, where, axes)
        else:
            parse_version(operand, where)
    return Condition(attr, op, operand, text.strip())


def _check_comparable(attr: str, op: str, where: str, axes: Mapping) -> None:
    """An order comparison reads versions only: checked for every value here, so a rule never
    meets a value it cannot compare (and never silently lets a cell through)."""
    axis = attr.split(".", maxsplit=1)[0]
    for value in axes[axis]:
        found = resolve(axes, {axis: value}, attr)
        if found is not None and not _is_version(found):
            raise MatrixError(where, f"{attr} is {_show(found)} for {AXES[axis]}.{value}: "
                              f"{op} compares versions only")


def _check_attr(attr: str, where: str, axes: Mapping) -> None:
    axis, *props = attr.split(".")
    if axis not in axes:
        raise MatrixError(where, f"{attr}: unknown axis {axis!r} (axes: {', '.join(AXES)})")
    if props and props[-1] == "major":
        props = props[:-1]
    if len(props) > 1:
        raise MatrixError(where, f"{attr}: expected AXIS, AXIS.PROPERTY or AXIS.PROPERTY.major")
    if props and not any(props[0] in values for values in axes[axis].values()):
        raise MatrixError(where, f"{attr}: no {AXES[axis]} value has a property {props[0]!r}")


def _parse_rule(index: int, raw: Any, axes: Mapping, settings: Mapping, pinned: set[str]) -> Rule:
    where = f"rules[{index}]"
    raw = _expect(raw, Mapping, where, "a mapping with id, why and require or set")
    extra = sorted(map(str, set(raw) - RULE_KEYS))
    if extra:
        raise MatrixError(f"{where}.{extra[0]}", f"unknown key (known: {', '.join(sorted(RULE_KEYS))})")
    rule_id = raw.get("id")
    if not isinstance(rule_id, str) or not rule_id:
        raise MatrixError(f"{where}.id", f"expected a rule id, got {_show(rule_id)}")
    where = f"rules.{rule_id}"
    if not isinstance(raw.get("why"), str) or not raw["why"].strip():
        raise MatrixError(f"{where}.why", "every rule says why it exists")
    if "require" not in raw and "set" not in raw:
        raise MatrixError(where, "expected require or set (a rule with neither does nothing)")
    conds = {}
    for key in ("when", "require"):
        items = _expect(raw.get(key, []), list, f"{where}.{key}", "a list of conditions")
        conds[key] = tuple(_parse_condition(c, f"{where}.{key}[{i}]", axes, settings)
                           for i, c in enumerate(items))
    sets = _expect(raw.get("set", {}), Mapping, f"{where}.set", "a mapping of settings")
    for key, value in sets.items():
        if key not in settings:
            raise MatrixError(f"{where}.set.{key}",
                              f"unknown setting (settings: {', '.join(settings)})")
        _check_setting(key, value, f"{where}.set.{key}", pinned)
    return Rule(rule_id, raw["why"].strip(), conds["when"], conds["require"], dict(sets))


def resolve(matrix_axes: Mapping, values: Mapping[str, str], attr: str) -> Any:
    axis, *props = attr.split(".")
    want_major = bool(props) and props[-1] == "major"
    if want_major:
        props = props[:-1]
    value: Any = values[axis]
    if props:
        value = matrix_axes[axis][values[axis]].get(props[0])
    if isinstance(value, list):
        return [str(v) for v in value]
    return major(value) if want_major else (None if value is None else str(value))


def holds(cond: Condition, matrix_axes: Mapping, values: Mapping[str, str]) -> bool:
    left = resolve(matrix_axes, values, cond.attr)
    if cond.op in ("set", "unset"):
        return (left is not None) == (cond.op == "set")
    right: Any = cond.operand
    if right.startswith("$"):
        right = resolve(matrix_axes, values, right[1:])
    if left is None or right is None:
        return False
    if cond.op == "in":
        return left in (right if isinstance(right, list) else [right])
    if cond.op in ("==", "!="):
        return (str(left) == str(right)) == (cond.op == "==")
    a, b = _comparable(left, cond), _comparable(right, cond)
    return {">=": a >= b, "<=": a <= b, ">": a > b, "<": a < b}[cond.op]


def _comparable(value: Any, cond: Condition) -> Version:
    # parse() checks every compared value; a Matrix built otherwise still never fails open.
    if not _is_version(value):
        raise MatrixError(cond.text, f"cannot compare {_show(value)}: not a version")
    return Version(value)


# ---------------------------------------------------------------------------------------- stages


def _parse_stages(raw: Any, settings: Mapping) -> dict[str, Stage]:
    raw = _expect(raw, Mapping, "stages", "a mapping of stage names")
    stages: dict[str, Stage] = {}
    for name, spec in raw.items():
        stages[str(name)] = _parse_stage(str(name), spec, stages, settings)
    return stages


def _parse_stage(name: str, spec: Any, earlier: Mapping[str, Stage], settings: Mapping) -> Stage:
    where = f"stages.{name}"
    spec = _expect(spec, Mapping, where, "a mapping with kind, depends, ...")
    extra = sorted(map(str, set(spec) - STAGE_KEYS))
    if extra:
        raise MatrixError(f"{where}.{extra[0]}", f"unknown key (known: {', '.join(sorted(STAGE_KEYS))})")

    def pick(key: str, allowed: set, default: Any = None) -> Any:
        value = spec.get(key, default)
        if not isinstance(value, (str, type(None))) or value not in allowed:
            raise MatrixError(f"{where}.{key}", f"expected one of {', '.join(sorted(map(str, allowed)))}"
                              f", got {_show(value)}")
        return value

    def names(key: str, allowed: Any, what: str) -> tuple[str, ...]:
        items = _expect(spec.get(key, []), list, f"{where}.{key}", f"a list of {what}")
        for item in items:
            if item not in allowed:
                raise MatrixError(f"{where}.{key}", f"{item!r}: expected one of "
                                  f"{', '.join(map(str, allowed)) or '(none)'}")
        return tuple(items)

    kind = pick("kind", STAGE_KINDS)
    venv = pick("venv", VENVS | {None})
    if kind in ("pytest", "script") and venv is None:
        raise MatrixError(f"{where}.venv", f"a {kind} stage runs in a venv: torch or ort")
    package = spec.get("package")
    if kind in ("build", "pytest") and (not isinstance(package, str) or "/" in package):
        raise MatrixError(f"{where}.package", f"expected a folder name under packages/, got "
                          f"{_show(package)}")
    run = tuple(_expect(spec.get("run", []), list, f"{where}.run", "an argv list"))
    if not all(isinstance(a, str) for a in run) or (kind == "script" and not run):
        raise MatrixError(f"{where}.run", "expected run: [script.py, args...] (text)")
    env = _expect(spec.get("env", {}), Mapping, f"{where}.env", "a mapping NAME: value")
    for text in [*run, *map(str, env.values())]:
        try:
            list(string.Formatter().parse(text))
        except ValueError as exc:
            raise MatrixError(f"{where}.run" if text in run else f"{where}.env",
                              f"{text!r}: {exc}") from None
    stage = Stage(name, kind, package, venv, pick("cuda", CUDA_MODES, "never"),
                  names("depends", list(AXES), "axes"),
                  names("after", list(earlier), "earlier stages"),
                  names("needs", sorted(NEEDS), "needs"), pick("cache", CACHES, "inputs"), run,
                  {str(k): str(v) for k, v in env.items()}, pick("key", KEY_MODES, "full"),
                  pick("gather", set(AXES) | {None}))
    if stage.gather and (stage.gather in stage.depends or stage.key != "own"):
        raise MatrixError(f"{where}.gather", f"a stage gathering {stage.gather} has key: own and "
                          f"does not depend on {stage.gather}")
    known = {"out", *AXES, *settings, *(f"{a.replace('-', '_')}_out" for a in stage.after)}
    if stage.gather:
        known |= {f"{a.replace('-', '_')}_outs" for a in stage.after}
    for field in sorted(stage.placeholders()):
        if field not in known:
            raise MatrixError(f"{where}.run", f"{{{field}}}: unknown placeholder (known: "
                              f"{', '.join(sorted(known))})")
        if field in AXES and field not in stage.depends:
            raise MatrixError(f"{where}.depends", f"the command reads {{{field}}}: list {field} "
                              "in depends (it is part of the result's key)")
    return stage


def stage_key(matrix: Matrix, stage: str | Stage, cell: Cell) -> tuple[tuple[str, str], ...]:
    """What the stage's result depends on in this cell: its axes, its settings, its inputs' keys."""
    stage = matrix.stages[stage] if isinstance(stage, str) else stage
    return tuple(sorted(_key_pairs(matrix, stage, cell, {})))


def _key_pairs(matrix: Matrix, stage: Stage, cell: Cell, done: dict[str, set]) -> set:
    # `done` keeps each earlier stage's pairs: a stage after many stages that are themselves after
    # many would otherwise be walked once per path (exponential in the number of stages).
    if stage.name in done:
        return done[stage.name]
    pairs: set[tuple[str, str]] = {("stage", stage.name)}
    axes = list(stage.depends)
    if stage.kind == "build" and not builds_cuda(matrix, stage, cell):
        axes = [a for a in axes if a not in ("toolkit", "arch_list")]
    pairs.update((axis, cell.values[axis]) for axis in axes)
    pairs.update((f"setting.{s}", str(cell.settings[s])) for s in stage.placeholders()
                 if s in matrix.settings)
    for before in stage.after if stage.key == "full" else ():
        earlier = _key_pairs(matrix, matrix.stages[before], cell, done)
        pairs.update(p for p in earlier if p[0] != "stage")
        pairs.add((f"after.{before}", ""))
    done[stage.name] = pairs
    return pairs


def builds_cuda(matrix: Matrix, stage: Stage, cell: Cell) -> bool:
    if stage.cuda == "always":
        return True
    if stage.cuda == "torch":
        return matrix.props("torch", cell.values["torch"]).get("cuda") is not None
    return False


# -------------------------------------------------------------------------------------- profiles


def _parse_profile(name: str, raw: Any, axes: Mapping) -> Profile:
    where = f"profiles.{name}"
    raw = _expect(raw, Mapping, where, "a mapping of axis: [values]")
    extra = sorted(set(map(str, raw)) - PROFILE_KEYS)
    if extra:
        raise MatrixError(f"{where}.{extra[0]}", f"unknown axis or key (axes: {', '.join(AXES)})")
    values = {}
    for axis in AXES:
        items = _expect(raw.get(axis), list, f"{where}.{axis}", "a non-empty list of values")
        if not items:
            raise MatrixError(f"{where}.{axis}", "expected a non-empty list of values")
        names = []
        for item in items:
            value = _value_name(axis, item) if not isinstance(item, float) else None
            if value is None:
                raise MatrixError(f"{where}.{axis}", f"YAML reads {item} as a number: quote it")
            if value not in axes[axis]:
                raise MatrixError(f"{where}.{axis}", f"{value}: unknown {axis} value (known: "
                                  f"{', '.join(axes[axis])})")
            names.append(value)
        _unique(names, f"{where}.{axis}", "value")
        values[axis] = tuple(names)
    runs_on = _expect(raw.get("runs_on", []), list, f"{where}.runs_on", "a list of runner labels")
    return Profile(name, str(raw.get("description", "")), tuple(map(str, runs_on)), values)


def _check_suite(matrix: Matrix) -> None:
    suite = _expect(matrix.data["suite"], Mapping, "suite", "a mapping")
    extra = sorted(map(str, set(suite) - SUITE_KEYS))
    if extra:
        raise MatrixError(f"suite.{extra[0]}", f"unknown key (known: {', '.join(sorted(SUITE_KEYS))})")
    for axis in ("torch", "ort"):
        if not isinstance(suite.get(axis), str) or suite.get(axis) not in matrix.axes[axis]:
            raise MatrixError(f"suite.{axis}", f"{suite.get(axis)!r}: unknown {axis} value")
    oldest_of = suite.get("oldest_ort_of")
    if not isinstance(oldest_of, str) or oldest_of not in matrix.profiles:
        raise MatrixError("suite.oldest_ort_of", f"{suite.get('oldest_ort_of')!r}: unknown profile")


def expand(matrix: Matrix, profile: str) -> tuple[list[Cell], list[Excluded]]:
    """The profile's cells (rules applied) and the combinations the rules excluded."""
    if profile not in matrix.profiles:
        raise MatrixError("profiles", f"{profile}: unknown profile (known: "
                          f"{', '.join(matrix.profiles)})")
    chosen = matrix.profiles[profile].values
    cells, excluded = [], []
    for combo in itertools.product(*(chosen[axis] for axis in AXES)):
        values = dict(zip(AXES, combo))
        settings = dict(matrix.settings)
        reason = None
        for rule in matrix.rules:
            if not all(holds(c, matrix.axes, values) for c in rule.when):
                continue
            failed = next((c for c in rule.require if not holds(c, matrix.axes, values)), None)
            if failed is not None:
                reason = Excluded(values, rule.id, rule.why, failed.text)
                break
            settings.update(rule.set)
        if reason:
            excluded.append(reason)
        else:
            cells.append(Cell(values, settings))
    return cells, excluded


def check_profile(matrix: Matrix, profile: str) -> None:
    cells, excluded = expand(matrix, profile)
    where = f"profiles.{profile}"
    if not cells:
        rules = sorted({e.rule for e in excluded})
        raise MatrixError(where, f"admits no cell (every combination is excluded by "
                          f"{', '.join(rules)})")
    for axis, values in matrix.profiles[profile].values.items():
        for value in values:
            if any(c.values[axis] == value for c in cells):
                continue
            blockers = [e for e in excluded if e.values[axis] == value]
            top = max({e.rule for e in blockers}, key=[e.rule for e in blockers].count)
            rule = next(r for r in matrix.rules if r.id == top)
            raise MatrixError(f"{where}.{axis}", f"{value}: no cell admits it (rule {rule.id}: "
                              f"{rule.why})")


def parse_filters(items: list[str], matrix: Matrix) -> dict[str, set[str]]:
    """`torch=2.14.1 ort=1.17.3,1.20.1` -> {axis: {values}}; unknown axes/values are errors."""
    filters: dict[str, set[str]] = {}
    for item in items:
        axis, sep, values = item.partition("=")
        if not sep or axis not in AXES:
            raise MatrixError("--only", f"{item!r}: expected AXIS=VALUE[,VALUE] with AXIS one of "
                              f"{', '.join(AXES)}")
        for value in values.split(","):
            if value not in matrix.axes[axis]:
                raise MatrixError("--only", f"{item!r}: unknown {axis} value {value!r} (known: "
                                  f"{', '.join(matrix.axes[axis])})")
            filters.setdefault(axis, set()).add(value)
    return filters


# ------------------------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ci.matrix", description=__doc__.splitlines()[0])
    parser.add_argument("--matrix", type=Path, default=MATRIX)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("check", help="validate matrix.yaml")
    cells_cmd = sub.add_parser("cells", help="list the cells of a profile")
    cells_cmd.add_argument("--profile", default="host")
    cells_cmd.add_argument("--excluded", action="store_true", help="also list excluded combinations")
    args = parser.parse_args(argv)
    try:
        matrix = load(args.matrix)
        if args.command == "check":
            counts = ", ".join(f"{p}: {len(expand(matrix, p)[0])} cells" for p in matrix.profiles)
            print(f"{args.matrix.name}: ok ({counts})")
            return 0
        cells, excluded = expand(matrix, args.profile)
        for cell in cells:
            print(cell.id)
        if args.excluded:
            for item in excluded:
                print(f"excluded: {item.id}: {item.rule} ({item.condition})")
    except MatrixError as exc:
        print(exc, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
