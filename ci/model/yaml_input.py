"""matrix.yaml's bytes as YAML data. The file is outside input: its size (MAX_BYTES) and nesting
(MAX_DEPTH) are bounded, and YAML anchors, aliases, tags, duplicate keys, base-60 numbers and
dates are refused, each as ONE line `matrix.yaml: <where>: <problem>`."""
from __future__ import annotations

import functools
from typing import Any

import yaml
from yaml.events import AliasEvent
from yaml.nodes import ScalarNode

from ci.model.errors import MatrixError

# Bounds on the input (the real file: ~12 KB, 5 levels deep, 432 combinations). PyYAML's pure
# Python parser reads ~100 KB/s on a busy 2-core machine: 256 KiB keeps a refusal within seconds.
MAX_BYTES = 256 * 1024
MAX_DEPTH = 32


@functools.cache
def _yaml_loader():
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
    _check_size(len(text.encode("utf-8", "surrogatepass")))
    try:
        return yaml.load(text, Loader=_yaml_loader())
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = _at(mark) if mark else "YAML"
        raise MatrixError(where, f"YAML syntax error: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise MatrixError("", f"YAML syntax error: {str(exc).splitlines()[0]}") from None
