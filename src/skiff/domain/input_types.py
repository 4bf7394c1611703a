"""The field types of the management API's input models: strict, and storable.

pydantic's default (lax) mode took ``"3"`` and ``true`` as ``3`` and ``1``; these take a JSON
number for a number and a JSON boolean for a boolean, nothing else. A number written with a
fraction of zero (``3.0``) is still the integer it names, as JSON does not tell the two apart.

Text refuses what no store or process can hold: NUL (PostgreSQL text, environment variables and
command lines end at it) and lone surrogates (not Unicode, so not UTF-8).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Strict, field_validator


def _integral(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def text_fault(value: str) -> str | None:
    """Why a store cannot hold ``value``, or None when it can."""
    if "\x00" in value:
        return "must not contain NUL characters"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "must be valid Unicode (it holds a lone surrogate)"
    return None


def _check_texts(value: Any) -> None:
    """``ValueError`` for the first string in ``value`` (keys included) a store cannot hold."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            fault = text_fault(item)
            if fault is not None:
                raise ValueError(f"{fault}{where}")
        elif isinstance(item, dict):
            for key, child in item.items():
                stack.append((key, " (in a name)"))
                stack.append((child, f" (at {key!r})" if text_fault(str(key)) is None else ""))
        elif isinstance(item, list):
            stack.extend((child, where) for child in item)


#: A JSON integer (or a number like ``3.0``); never a string or a boolean.
Int = Annotated[int, Strict()]
#: ``true`` or ``false`` only.
Bool = Annotated[bool, Strict()]
#: A JSON string (``StrictInput`` refuses NUL and lone surrogates in it).
Text = Annotated[str, Strict()]


class StrictInput(BaseModel):
    """The base of every management input model: unknown fields refused, and each field's
    value checked before its type: an integral number made an ``int`` and text a store cannot
    hold refused, so the error names the field."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("*", mode="before")
    @classmethod
    def _storable(cls, value: Any) -> Any:
        _check_texts(value)
        return _integral(value)
