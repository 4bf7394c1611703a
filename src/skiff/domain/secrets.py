"""Users' secrets: a name and a value kept sealed, referred to from a template's or an
endpoint's environment as ``{{ RUNPOD_SECRET_name }}`` (the hosted platform's syntax) and
replaced by the value only in the environment a worker or pod starts with.

Nothing but that environment ever holds the value: answers, pages and logs show the
reference.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pydantic import Field, field_validator

from skiff.domain.input_types import StrictInput, Text
from skiff.errors import Invalid

#: A secret's name: what may follow ``RUNPOD_SECRET_`` in a reference.
NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}"
_NAME = re.compile(NAME_PATTERN)
#: ``{{ RUNPOD_SECRET_name }}``, with or without the spaces inside the braces.
_REFERENCE = re.compile(r"\{\{\s*RUNPOD_SECRET_(" + NAME_PATTERN + r")\s*\}\}")
MAX_VALUE_LENGTH = 32768
_ID = re.compile(r"[a-z0-9]{1,64}")


@dataclass(frozen=True, slots=True)
class Secret:
    """A secret as it is shown: never its value."""

    id: str
    name: str
    created_at: float
    updated_at: float


class SecretCreate(StrictInput):
    name: Text = Field(
        min_length=1,
        max_length=100,
        description="Unique per owner; letters, digits, `_`, `.` and `-`, starting with a "
        "letter or digit. A template refers to it as `{{ RUNPOD_SECRET_<name> }}`.",
    )
    value: Text = Field(
        min_length=1, max_length=MAX_VALUE_LENGTH, description="Stored encrypted; never returned"
    )

    @field_validator("name")
    @classmethod
    def _name_fits_a_reference(cls, name: str) -> str:
        if not valid_name(name):
            raise ValueError(
                "a secret's name is letters, digits, _ . and -, starting with a letter or digit"
                " (it goes into {{ RUNPOD_SECRET_<name> }})"
            )
        return name


class SecretValue(StrictInput):
    """A secret's new value."""

    value: Text = Field(
        min_length=1, max_length=MAX_VALUE_LENGTH, description="Stored encrypted; never returned"
    )


def invalid_id(secret_id: str) -> str | None:
    """Why ``secret_id`` cannot be a secret's id, or None when it can."""
    if _ID.fullmatch(secret_id):
        return None
    return "invalid ID supplied: a secret's id is lowercase letters and digits (GET /v1/secrets)"


def valid_name(name: str) -> bool:
    return _NAME.fullmatch(name) is not None


def references(env: Mapping[str, str]) -> set[str]:
    """The names of the secrets an environment refers to."""
    return {m.group(1) for value in env.values() for m in _REFERENCE.finditer(value)}


def refers_to(env: Mapping[str, str], names: Iterable[str]) -> bool:
    """Whether the environment refers to any of these secrets."""
    return not references(env).isdisjoint(names)


def missing_references(env: Mapping[str, str], known: Iterable[str], field: str) -> None:
    """400 naming the secrets ``env`` refers to that do not exist."""
    missing = sorted(references(env) - set(known))
    if missing:
        names = ", ".join(missing)
        raise Invalid(
            f"{field}: no secret named {names} (POST /v1/secrets makes one; "
            f"{{{{ RUNPOD_SECRET_<name> }}}} refers to it)",
            field=field,
        )


def resolve(env: Mapping[str, str], values: Mapping[str, str]) -> dict[str, str]:
    """The environment with each reference replaced by its secret's value. A reference to a
    secret gone since the template was saved stays as written (the worker sees no value rather
    than failing to start); its name is in ``references(env) - values.keys()``."""

    def value_of(match: re.Match[str]) -> str:
        return values.get(match.group(1), match.group(0))

    return {key: _REFERENCE.sub(value_of, value) for key, value in env.items()}
