"""Settings that cannot be read, told in one line each: the variable, its value, what is allowed.

pydantic's own report is a multi-line block per error with a link to its documentation, under
a traceback: a newcomer who typed ``SKIFF_PROVIDER=Docker`` should read instead
``SKIFF_PROVIDER='Docker' is not allowed: one of 'local', 'docker', 'ray'``. What is allowed
is read off the field itself (its type and every bound), not only the bound that failed, so one
line says the whole rule. Values of settings that may hold a password are not repeated.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import annotated_types
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

#: Settings whose value may carry a secret (a key, a password in a URL): never echoed.
_SECRET_WORDS = ("key", "password", "secret", "token", "url", "storage")

_KINDS: dict[Any, str] = {
    int: "a whole number",
    float: "a number",
    bool: "true or false (also 1/0, yes/no, on/off)",
    str: "text",
    Path: "a path",
}


def explain(
    exc: ValidationError,
    model: type[BaseModel],
    env_prefix: str,
    environ: Mapping[str, str],
    flags: Mapping[str, str] | None = None,
) -> list[str]:
    """One line per setting that failed. ``environ``: the environment it was read from (a
    setting with several names is named by the one set there); ``flags``: the command-line
    option each field was given by this time (``{"port": "--port"}``), named instead."""
    lines: list[str] = []
    seen: set[str] = set()
    for error in exc.errors(include_url=False):
        loc = error.get("loc") or ()
        source = str(loc[0]) if loc else ""
        field = _field_of(model, source)
        if field in seen:  # a union's members each report the same value once
            continue
        seen.add(field)
        if flags and field in flags:
            name = flags[field]
        else:
            name = _variable_of(model, field, env_prefix, environ)
        shown = "(hidden)" if _is_secret(field) else repr(_plain(error.get("input")))
        info = model.model_fields.get(field)
        rule = allowed(info) if info is not None else error["msg"]
        line = f"{name}={shown} is not allowed: {rule}"
        if error.get("type") == "value_error":
            # A validator of the field's own: its message says what the type and bounds do not.
            line += f" ({str(error['msg']).removeprefix('Value error, ')})"
        lines.append(line)
    return lines


def allowed(info: FieldInfo) -> str:
    """What a field takes, in words: its kind and its bounds."""
    annotation, optional = _unwrapped(info.annotation)
    if typing.get_origin(annotation) is typing.Literal:
        choices = ", ".join(repr(choice) for choice in typing.get_args(annotation))
        text = f"one of {choices}"
    else:
        text = _KINDS.get(annotation, getattr(annotation, "__name__", str(annotation)))
    lengths = {type(item): item for item in info.metadata}
    if annotated_types.MinLen in lengths and annotated_types.MaxLen in lengths:
        low = lengths[annotated_types.MinLen].min_length
        high = lengths[annotated_types.MaxLen].max_length
        said = [f"of {low} to {high} characters"]
    else:
        said = [bound for bound in (_bound(item) for item in info.metadata) if bound]
    if said:
        text += " " + " and ".join(said)
    if optional:
        text += ", or unset"
    return text


#: How a description says each bound: the bound's kind, the attribute holding its value, the text.
_BOUNDS: tuple[tuple[type, str, str], ...] = (
    (annotated_types.Gt, "gt", "more than {}"),
    (annotated_types.Ge, "ge", "at least {}"),
    (annotated_types.Lt, "lt", "less than {}"),
    (annotated_types.Le, "le", "at most {}"),
    (annotated_types.MinLen, "min_length", "of at least {} characters"),
    (annotated_types.MaxLen, "max_length", "of at most {} characters"),
)


def _bound(item: object) -> str:
    for kind, attribute, text in _BOUNDS:
        if isinstance(item, kind):
            return text.format(_number(getattr(item, attribute)))
    return ""


def _number(value: object) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _unwrapped(annotation: Any) -> tuple[Any, bool]:
    """``X | None`` -> (X, True); anything else -> (it, False)."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        members = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        if len(members) == 1:
            return members[0], True
    return annotation, False


def _field_of(model: type[BaseModel], source: str) -> str:
    """The field a location names: the field itself, or one of its aliases."""
    if source in model.model_fields:
        return source
    for name, info in model.model_fields.items():
        alias = info.validation_alias
        choices = getattr(alias, "choices", [alias]) if alias is not None else []
        if any(str(choice).lower() == source.lower() for choice in choices):
            return name
    return source.lower()


def _variable_of(
    model: type[BaseModel], field: str, env_prefix: str, environ: Mapping[str, str]
) -> str:
    """The environment variable a field was read from: of its names, the one that is set."""
    names = [f"{env_prefix}{field.upper()}"]
    alias = model.model_fields[field].validation_alias if field in model.model_fields else None
    for choice in getattr(alias, "choices", []):
        if str(choice).upper().startswith(env_prefix):
            names.append(str(choice).upper())
    upper = {key.upper() for key in environ}
    return next((name for name in names if name in upper), names[0])


def _is_secret(field: str) -> bool:
    return any(word in field for word in _SECRET_WORDS)


def _plain(value: object) -> object:
    return str(value) if isinstance(value, Path) else value
