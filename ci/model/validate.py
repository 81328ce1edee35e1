"""matrix.yaml's data validated by the schema; a pydantic ValidationError becomes ONE line,
MatrixError `matrix.yaml: <where>: <problem>`: the key path (`stages.unit-ort.after[0]`, a rule by
its id), what was expected and the input."""
from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import ValidationError

from ci.model.errors import MatrixError, show
from ci.model.schema import MatrixFile

# what pydantic's type errors expect, in matrix.yaml's words
TYPE_WORDS = {"string_type": "text", "dict_type": "a mapping", "list_type": "a list",
              "tuple_type": "a list", "bool_type": "true or false", "int_type": "a whole number",
              "invalid_key": "a text key"}


def validate(data: Any) -> MatrixFile:
    """matrix.yaml's data as a MatrixFile; MatrixError naming the first problem."""
    if not isinstance(data, Mapping):
        raise MatrixError("", f"expected a mapping of sections, got {type(data).__name__}")
    try:
        return MatrixFile.model_validate(data)
    except ValidationError as exc:
        raise _at_its_defaults(_one_error(exc.errors(include_url=False)[0], data), data) from None
    except MatrixError as exc:        # raised by a validator outside pydantic's error handling
        raise _at_its_defaults(exc, data) from None


def _at_its_defaults(error: MatrixError, data: Mapping) -> MatrixError:
    """An error at a stage's key that the stage takes from `stage_defaults.GROUP` is named there,
    where the value is written: `stage_defaults.suite.after[0]: ... (taken by stages.suite-x)`."""
    stages, groups = data.get("stages"), data.get("stage_defaults")
    if not isinstance(stages, Mapping) or not isinstance(groups, Mapping):
        return error
    for name, spec in stages.items():
        prefix = f"stages.{name}."
        if not error.where.startswith(prefix) or not isinstance(spec, Mapping):
            continue
        rest = error.where[len(prefix):]
        key = rest.split(".")[0].split("[")[0]
        group = spec.get("defaults")
        keys = groups.get(group) if isinstance(group, str) else None
        if key not in spec and isinstance(keys, Mapping) and key in keys:
            return MatrixError(f"stage_defaults.{group}.{rest}",
                               f"{error.problem} (taken by stages.{name})")
    return error


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
