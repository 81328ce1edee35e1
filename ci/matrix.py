"""Load, validate and expand matrix.yaml: axes, rules as data, stages and profiles.

Every problem is ONE line, `matrix.yaml: <key path>: <problem>`, raised as MatrixError before
anything runs.

    python -m ci.matrix check                 # validate (exit 1 with the line on a problem)
    python -m ci.matrix cells [--profile host] [--excluded]
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import re
import string
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

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
VALUE_PROPS = {"torch": {"cuda", "packages"}, "arch_lists": {"min_cuda"}, "opsets": {"min_ort"},
               "ort": {"packages"}, "tensorrt": {"cuda_majors"}}
CONDITION = re.compile(r"^(?P<attr>[A-Za-z_][\w.]*)\s+(?:(?P<op>==|!=|>=|<=|>|<|in)\s+"
                       r"(?P<operand>\S+)|(?P<unary>set|unset))$")


class MatrixError(ValueError):
    """A problem in matrix.yaml; str() is the one line to print."""

    def __init__(self, where: str, problem: str, file: str = "matrix.yaml"):
        super().__init__(f"{file}: {where}: {problem}" if where else f"{file}: {problem}")


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


def _yaml_loader():
    import yaml

    class Loader(yaml.SafeLoader):
        """SafeLoader that refuses duplicate keys (PyYAML silently keeps the last)."""

    def construct_mapping(loader, node, deep=False):
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = loader.construct_object(key_node, deep=True)
            if key in seen:
                raise MatrixError(f"line {key_node.start_mark.line + 1}",
                                  f"duplicate key {key!r} (first on line {seen[key]})")
            seen[key] = key_node.start_mark.line + 1
        return yaml.SafeLoader.construct_mapping(loader, node, deep)

    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)
    return Loader


def read_yaml(text: str) -> Any:
    import yaml

    try:
        return yaml.load(text, Loader=_yaml_loader())
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "YAML"
        raise MatrixError(where, f"YAML syntax error: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise MatrixError("", f"YAML syntax error: {str(exc).splitlines()[0]}") from None


# ------------------------------------------------------------------------------------- versions


def version_key(text: Any) -> tuple:
    """'1.17.3' -> (1, 17, 3); non-numeric parts sort after numbers (so 12.4.131~x > 12.4)."""
    parts = re.split(r"[.+~-]", str(text))
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in parts)


def is_version(text: Any) -> bool:
    return isinstance(text, (str, int)) and re.fullmatch(r"\d+(\.\d+)*", str(text)) is not None


def major(value: Any) -> str | None:
    return None if value is None else str(value).split(".")[0]


# ------------------------------------------------------------------------------------ validation


def load(path: Path = MATRIX) -> Matrix:
    """Read and validate matrix.yaml (all profiles expanded once); raise MatrixError."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise MatrixError("", f"cannot read: {exc.strerror}", Path(path).name) from None
    try:
        return parse(read_yaml(text), Path(path))
    except MatrixError as exc:
        if Path(path).name != "matrix.yaml":
            raise MatrixError("", str(exc).removeprefix("matrix.yaml: "), Path(path).name) from None
        raise


def parse(data: Any, path: Path = MATRIX) -> Matrix:
    if not isinstance(data, Mapping):
        raise MatrixError("", f"expected a mapping of sections, got {type(data).__name__}")
    unknown = sorted(set(map(str, data)) - SECTIONS)
    if unknown:
        raise MatrixError(unknown[0], f"unknown section (known: {', '.join(sorted(SECTIONS))})")
    for section in ("settings", "rules", "stages", "profiles", "suite", *AXES.values()):
        if section not in data:
            raise MatrixError(section, "missing section")
    _check_pins("tools", data.get("tools", {}))
    _check_pins("python", data.get("python", {}))
    axes = {axis: _parse_axis(axis, data[section]) for axis, section in AXES.items()}
    _check_toolkits(data["toolkits"])
    settings = _parse_settings(data["settings"])
    rules = tuple(_parse_rule(i, raw, axes, settings) for i, raw in
                  enumerate(_expect(data["rules"], list, "rules", "a list of rules")))
    _unique([rule.id for rule in rules], "rules", "rule id")
    stages = _parse_stages(data["stages"], settings)
    profiles = {str(name): _parse_profile(str(name), raw, axes)
                for name, raw in _expect(data["profiles"], Mapping, "profiles",
                                         "a mapping of profile names").items()}
    matrix = Matrix(path, data, axes, settings, rules, stages, profiles)
    _check_suite(matrix)
    for name in profiles:
        check_profile(matrix, name)
    return matrix


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


def _check_pins(section: str, pins: Any) -> None:
    for name, version in _expect(pins, Mapping, section, "a mapping name: \"version\"").items():
        if not isinstance(version, str) or not re.fullmatch(r"[0-9][0-9A-Za-z.+!-]*", version):
            raise MatrixError(f"{section}.{name}",
                              f"expected a quoted version string, got {_show(version)}")


def _value_name(axis: str, value: Any) -> str:
    section = AXES[axis]
    if axis == "opset":
        if not isinstance(value, int) or isinstance(value, bool):
            raise MatrixError(f"{section}.{value}", f"expected an opset number, got {_show(value)}")
        return str(value)
    if isinstance(value, float):
        raise MatrixError(f"{section}.{value}", f"YAML reads {value} as a number: write it quoted, "
                          "as a string (\"1.20\" is not 1.2)")
    if not isinstance(value, str) or not value:
        raise MatrixError(f"{section}.{value}", f"expected a quoted string, got {_show(value)}")
    return value


def _parse_axis(axis: str, raw: Any) -> dict[str, Mapping[str, Any]]:
    section = AXES[axis]
    values = _expect(raw, Mapping, section, f"a mapping of {axis} values to their properties")
    if not values:
        raise MatrixError(section, "has no values")
    out = {}
    for value, raw_props in values.items():
        name = _value_name(axis, value)
        props = _expect(raw_props if raw_props is not None else {}, Mapping, f"{section}.{name}",
                        "a mapping of properties")
        allowed = VALUE_PROPS.get(section)
        if allowed is not None:
            extra = sorted(set(props) - allowed)
            if extra:
                raise MatrixError(f"{section}.{name}.{extra[0]}",
                                  f"unknown key (known: {', '.join(sorted(allowed))})")
        out[name] = props
    return out


def _check_toolkits(raw: Mapping) -> None:
    from ci import toolkits

    for tid, spec in raw.items():
        try:
            toolkits.parse_spec(str(tid), spec)
        except toolkits.ToolkitError as exc:
            message = str(exc).removeprefix("opforge: ").removeprefix("matrix.yaml: ")
            where, _, problem = message.partition(": ")
            raise MatrixError(where, problem) from None


def _parse_settings(raw: Any) -> dict[str, Any]:
    return dict(_expect(raw, Mapping, "settings", "a mapping of setting: default"))


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
    return Condition(attr, op, operand, text.strip())


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


def _parse_rule(index: int, raw: Any, axes: Mapping, settings: Mapping) -> Rule:
    where = f"rules[{index}]"
    raw = _expect(raw, Mapping, where, "a mapping with id, why and require or set")
    extra = sorted(set(raw) - RULE_KEYS)
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
    for key in sets:
        if key not in settings:
            raise MatrixError(f"{where}.set.{key}",
                              f"unknown setting (settings: {', '.join(settings)})")
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
    a, b = version_key(left), version_key(right)
    return {">=": a >= b, "<=": a <= b, ">": a > b, "<": a < b}[cond.op]


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
    extra = sorted(set(spec) - STAGE_KEYS)
    if extra:
        raise MatrixError(f"{where}.{extra[0]}", f"unknown key (known: {', '.join(sorted(STAGE_KEYS))})")

    def pick(key: str, allowed: set, default: Any = None) -> Any:
        value = spec.get(key, default)
        if value not in allowed:
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
    if kind == "script" and (not run or not all(isinstance(a, str) for a in run)):
        raise MatrixError(f"{where}.run", "a script stage needs run: [script.py, args...]")
    env = _expect(spec.get("env", {}), Mapping, f"{where}.env", "a mapping NAME: value")
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
    pairs: set[tuple[str, str]] = {("stage", stage.name)}
    axes = list(stage.depends)
    if stage.kind == "build" and not builds_cuda(matrix, stage, cell):
        axes = [a for a in axes if a not in ("toolkit", "arch_list")]
    pairs.update((axis, cell.values[axis]) for axis in axes)
    pairs.update((f"setting.{s}", str(cell.settings[s])) for s in stage.placeholders()
                 if s in matrix.settings)
    for before in stage.after if stage.key == "full" else ():
        pairs.update(p for p in stage_key(matrix, before, cell) if p[0] != "stage")
        pairs.add((f"after.{before}", ""))
    return tuple(sorted(pairs))


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
    runs_on = raw.get("runs_on", [])
    return Profile(name, str(raw.get("description", "")), tuple(map(str, runs_on)), values)


def _check_suite(matrix: Matrix) -> None:
    suite = _expect(matrix.data["suite"], Mapping, "suite", "a mapping")
    extra = sorted(set(suite) - SUITE_KEYS)
    if extra:
        raise MatrixError(f"suite.{extra[0]}", f"unknown key (known: {', '.join(sorted(SUITE_KEYS))})")
    for axis in ("torch", "ort"):
        if suite.get(axis) not in matrix.axes[axis]:
            raise MatrixError(f"suite.{axis}", f"{suite.get(axis)!r}: unknown {axis} value")
    if suite.get("oldest_ort_of") not in matrix.profiles:
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
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
