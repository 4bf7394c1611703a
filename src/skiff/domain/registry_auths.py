"""Container registry credentials: the password is kept and never shown back."""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from skiff.domain.input_types import StrictInput, Text

#: What every id of a registry auth looks like (``ids.short_id``): another string cannot name
#: one, and the specification answers it 400 "invalid ID supplied" rather than 404.
_ID = re.compile(r"[a-z0-9]{1,64}")


def invalid_id(auth_id: str) -> str | None:
    """Why ``auth_id`` cannot be a registry auth's id, or None when it can."""
    if _ID.fullmatch(auth_id):
        return None
    return (
        "invalid ID supplied: a container registry auth id is lowercase letters and digits "
        "(GET /v1/containerregistryauth lists yours), not its name"
    )


class RegistryAuthCreate(StrictInput):
    name: Text = Field(min_length=1, max_length=191, description="Unique per owner")
    username: Text = Field(min_length=1, max_length=1024)
    password: Text = Field(min_length=1, max_length=8192, description="Stored; never returned")


class RegistryAuthCredentials(StrictInput):
    """New credentials for an auth (the runpod SDK's update_container_registry_auth)."""

    username: Text = Field(min_length=1, max_length=1024)
    password: Text = Field(min_length=1, max_length=8192)


class RegistryAuth(BaseModel):
    id: str
    name: str
