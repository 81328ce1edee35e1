"""The cross-references of matrix.yaml: axis pins carry their key's version, rules name known axes,
properties and settings, stages run after earlier stages with known tools and placeholders,
profiles name known values and stages (closed under `after`), the suite a known ORT release."""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Callable, cast

from packaging.version import Version

from ci.model.errors import MatrixError, show
from ci.model.values import (
    AXES,
    AXIS_PACKAGES,
    ORDER_OPS,
    is_version,
    major,
    parse_version,
    pin_parts,
)

# pin_parts of a pin the schema checked already (never None)
_checked_pin = cast(Callable[[Any], "tuple[str, Version]"], pin_parts)

MAX_COMBINATIONS = 50_000        # axis-value combinations over all profiles


def check_all(spec: Any) -> None:
    """Every cross-reference of a MatrixFile whose sections are each valid."""
    axes = spec.axes()
    _check_axis_pins(axes)
    for name, value in spec.settings.items():
        _check_setting(name, value, f"settings.{name}", spec.python)
    _check_rules(spec.rules, axes, spec.settings, spec.python)
    _check_stage_defaults(spec.stage_defaults, spec.stages, spec.tools)
    _check_stages(spec.stages, spec.settings, spec.tools)
    _check_profiles(spec.profiles, axes, spec.stages)
    _check_suite(spec.suite, axes)



def _check_axis_pins(axes: Mapping) -> None:
    """The package that names the axis is pinned at the value's version: ort "1.32.0" installs
    onnxruntime==1.32.0, never another release under that name."""
    for axis, names in AXIS_PACKAGES.items():
        for value, props in axes[axis].items():
            where = f"{AXES[axis]}.{value}.packages"
            if props["packages"] is None:
                raise MatrixError(where, f"missing (expected a pin {names[0]}=={value})")
            pins = dict(map(_checked_pin, props["packages"]))
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
    pins = dict(map(_checked_pin, gpu_packages))
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


def _check_rules(rules: tuple, axes: Mapping, settings: Mapping,
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


def _check_stage_defaults(groups: Mapping[str, Any], stages: Mapping[str, Any],
                          tools: Mapping) -> None:
    """What a group names exists, used or not (whether it is earlier: each stage that uses it)."""
    for group, keys in groups.items():
        where = f"stage_defaults.{group}"
        for index, before in enumerate(keys.after or ()):
            if before not in stages:
                raise MatrixError(f"{where}.after[{index}]", f"{before!r}: expected a stage name "
                                  f"(known: {', '.join(stages)})")
        _check_tools(keys.tools or (), where, tools)


def _check_tools(names: tuple, where: str, tools: Mapping) -> None:
    for index, tool in enumerate(names):
        if tool not in tools:
            raise MatrixError(f"{where}.tools[{index}]", f"{tool!r}: not a key of tools: "
                              f"(known: {', '.join(tools)})")


def _check_stages(stages: Mapping[str, Any], settings: Mapping, tools: Mapping) -> None:
    earlier: list[str] = []
    for name, stage in stages.items():
        where = f"stages.{name}"
        for index, before in enumerate(stage.after):
            if before not in earlier:
                raise MatrixError(f"{where}.after[{index}]", f"{before!r}: expected an earlier "
                                  f"stage (earlier: {', '.join(earlier) or 'none'})")
        _check_tools(stage.tools, where, tools)
        _check_placeholders(stage, where, settings)
        earlier.append(name)


def _check_placeholders(stage: Any, where: str, settings: Mapping) -> None:
    outs = {f"{before.replace('-', '_')}_out" for before in stage.after}
    known = {"out", *AXES, *settings, *outs, *(f"{out}s" for out in outs if stage.gather)}
    for field in sorted(stage.placeholders()):
        if field not in known:
            raise MatrixError(f"{where}.run", f"{{{field}}}: unknown placeholder (known: "
                              f"{', '.join(sorted(known))})")
        if field in AXES and field not in stage.depends:
            raise MatrixError(f"{where}.depends", f"the command reads {{{field}}}: list {field} "
                              "in depends (it is part of the result's key)")


def _check_profiles(profiles: Mapping[str, Any], axes: Mapping,
                    stages: Mapping[str, Any]) -> None:
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
        _check_exclusions(name, profile)
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


def _check_exclusions(name: str, profile: Any) -> None:
    """An exclusion names values the profile has (else it would leave out nothing, silently)."""
    for index, exclusion in enumerate(profile.exclude):
        for axis, value in exclusion.values.items():
            if value not in profile.values[axis]:
                raise MatrixError(f"profiles.{name}.exclude[{index}].{axis}",
                                  f"{value}: not a {axis} value of this profile (it has "
                                  f"{', '.join(profile.values[axis])})")


def _check_suite(suite: Any, axes: Mapping) -> None:
    if suite.ort not in axes["ort"]:
        raise MatrixError("suite.ort", f"{suite.ort!r}: unknown ort value")
