"""Load and expand matrix.yaml: axes, rules as data, stages and profiles.

matrix.yaml is outside input: this reader bounds its size (MAX_BYTES) and nesting (MAX_DEPTH) and
refuses YAML anchors, aliases, tags and duplicate keys; ci/schema.py declares what the file holds
(every section, version, pin and reference) and bounds what its profiles expand to. Every problem
is ONE line, `matrix.yaml: <key path>: <problem>`, raised as MatrixError before anything runs.

    python -m ci.matrix check                 # validate (exit 2 with the line on a problem)
    python -m ci.matrix cells [--profile host] [--excluded]
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import itertools
import stat
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from packaging.version import Version

from ci import schema
from ci.schema import AXES, Condition, MatrixError, Profile, Rule, Stage, parse_pin  # noqa: F401

REPO = Path(__file__).resolve().parent.parent
MATRIX = REPO / "matrix.yaml"

# Bounds on the input (the real file: ~12 KB, 5 levels deep, 432 combinations). PyYAML's pure
# Python parser reads ~100 KB/s on a busy 2-core machine: 256 KiB keeps a refusal within seconds.
MAX_BYTES = 256 * 1024
MAX_DEPTH = 32

# --------------------------------------------------------------------------------------- model


@dataclasses.dataclass(frozen=True)
class Cell:
    values: Mapping[str, str]      # axis -> value, in AXES order
    settings: Mapping[str, Any]
    cpu_builds: bool = False       # its profile's (or variant's) cpu_builds
    variant: str = ""              # the release variant it builds (profile `variants:`)
    label: str = ""                # its CUDA builds' local version label ("" for the default)
    gpu: bool = False              # its profile's gpu: ORT venvs install onnxruntime-gpu
    native_toolchain: bool = False # its profile's toolchain is native (no zig)

    @property
    def id(self) -> str:
        axes = " ".join(f"{axis}={self.values[axis]}" for axis in AXES)
        return f"{axes} variant={self.variant}" if self.variant else axes

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
    toolkits: Mapping[str, Any] = dataclasses.field(default_factory=dict)   # id -> ToolkitSpec

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
        return min(self.profiles[profile].values[axis], key=schema.version_key)

    def newest(self, axis: str, profile: str) -> str:
        return max(self.profiles[profile].values[axis], key=schema.version_key)


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


# ------------------------------------------------------------------------------------ validation


def load(path: Path = MATRIX) -> Matrix:
    """Read and validate matrix.yaml (all profiles expanded once); raise MatrixError."""
    path = Path(path)
    try:
        return from_bytes(_read_bounded(path), path)
    except MatrixError as exc:
        if path.name != "matrix.yaml":
            raise MatrixError(exc.where, exc.problem, path.name) from None
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
    """The Matrix of matrix.yaml's data, validated by its declared schema (ci/schema.py)."""
    spec = schema.validate(data)
    matrix = Matrix(path, data, spec.axes(), dict(spec.settings), spec.rules, dict(spec.stages),
                    dict(spec.profiles), dict(spec.toolkits))
    for name in matrix.profiles:
        check_profile(matrix, name)
    return matrix


# ----------------------------------------------------------------------------------------- rules


def holds(cond: Condition, matrix_axes: Mapping, values: Mapping[str, str]) -> bool:
    left = schema.resolve(matrix_axes, values, cond.attr)
    if cond.op in ("set", "unset"):
        return (left is not None) == (cond.op == "set")
    right: Any = cond.operand
    if right.startswith("$"):
        right = schema.resolve(matrix_axes, values, right[1:])
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
    if not schema.is_version(value):
        raise MatrixError(cond.text, f"cannot compare {schema.show(value)}: not a version")
    return Version(value)


# ---------------------------------------------------------------------------------------- stages


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
    if stage.kind == "build" and cell.label and builds_cuda(matrix, stage, cell):
        pairs.add(("label", cell.label))   # the label is in the wheel's name and metadata
    pairs.update((f"setting.{s}", str(cell.settings[s])) for s in stage.placeholders()
                 if s in matrix.settings)
    for before in stage.after if stage.key == "full" else ():
        earlier = _key_pairs(matrix, matrix.stages[before], cell, done)
        pairs.update(p for p in earlier if p[0] != "stage")
        pairs.add((f"after.{before}", ""))
    done[stage.name] = pairs
    return pairs


def builds_cuda(matrix: Matrix, stage: Stage, cell: Cell) -> bool:
    if stage.cuda == "required":    # cannot build without CUDA: a CPU-builds profile too
        return True
    if cell.cpu_builds:
        return False
    if stage.cuda == "always":
        return True
    if stage.cuda == "torch":
        return matrix.props("torch", cell.values["torch"]).get("cuda") is not None
    return False


# -------------------------------------------------------------------------------------- profiles


def expand(matrix: Matrix, profile: str) -> tuple[list[Cell], list[Excluded]]:
    """The profile's cells (rules applied) and the combinations the rules excluded."""
    if profile not in matrix.profiles:
        raise MatrixError("profiles", f"{profile}: unknown profile (known: "
                          f"{', '.join(matrix.profiles)})")
    cells, excluded = [], []
    for chosen, cell in _variant_axes(matrix.profiles[profile]):
        _expand_into(matrix, chosen, cell, cells, excluded)
    return cells, excluded


def _variant_axes(profile: Any) -> list[tuple[dict[str, tuple[str, ...]], Cell]]:
    """(axis values, a template cell) per variant built (one, without variants)."""
    if not profile.variants:
        return [(profile.values, Cell({}, {}, profile.cpu_builds, gpu=profile.gpu,
                                      native_toolchain=profile.toolchain == "native"))]
    out = []
    for name, variant in profile.variants.items():
        if variant.skip:
            continue
        values = {axis: tuple(getattr(variant, axis, None) or chosen)
                  for axis, chosen in profile.values.items()}
        out.append((values, Cell({}, {}, variant.cpu_builds, name, "" if variant.default else name,
                                 gpu=profile.gpu, native_toolchain=profile.toolchain == "native")))
    return out


def _expand_into(matrix: Matrix, chosen: Mapping[str, tuple[str, ...]], template: Cell,
                 cells: list[Cell], excluded: list[Excluded]) -> None:
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
            cells.append(dataclasses.replace(template, values=values, settings=settings))


def check_profile(matrix: Matrix, profile: str) -> None:
    cells, excluded = expand(matrix, profile)
    where = f"profiles.{profile}"
    if not cells:
        rules = sorted({e.rule for e in excluded})
        raise MatrixError(where, f"admits no cell (every combination is excluded by "
                          f"{', '.join(rules)})")
    for axis, values in _declared_values(matrix.profiles[profile]).items():
        for value in values:
            if any(c.values[axis] == value for c in cells):
                continue
            blockers = [e for e in excluded if e.values[axis] == value]
            top = max({e.rule for e in blockers}, key=[e.rule for e in blockers].count)
            rule = next(r for r in matrix.rules if r.id == top)
            raise MatrixError(f"{where}.{axis}", f"{value}: no cell admits it (rule {rule.id}: "
                              f"{rule.why})")


def _declared_values(profile: Any) -> dict[str, set[str]]:
    """The axis values some built variant (or the profile itself) uses: each must admit a cell."""
    out: dict[str, set[str]] = {}
    for chosen, _ in _variant_axes(profile):
        for axis, values in chosen.items():
            out.setdefault(axis, set()).update(values)
    return {axis: sorted(values) for axis, values in out.items()}


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
