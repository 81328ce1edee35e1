"""The model of matrix.yaml once read: the Matrix (axes, settings, rules, stages, profiles,
toolkits), a Cell of a profile (one value per axis, the settings the rules set) and an Excluded
combination (the rule and condition that excluded it)."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ci.model.schema import Profile, Rule, Stage
from ci.model.values import AXES, version_key

REPO = Path(__file__).resolve().parents[2]
MATRIX = REPO / "matrix.yaml"


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
    rule: str           # a rule's id, or profiles.<name>.exclude[<i>] (the profile left it out)
    why: str
    condition: str

    @property
    def by(self) -> str:
        """What excluded it, as a person reads it: `rule <id>` or the profile's exclude entry."""
        return self.rule if self.rule.startswith("profiles.") else f"rule {self.rule}"

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
        return min(self.profiles[profile].values[axis], key=version_key)

    def newest(self, axis: str, profile: str) -> str:
        return max(self.profiles[profile].values[axis], key=version_key)
