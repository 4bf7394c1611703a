"""Container registry credentials: the password is kept and never shown back."""

from __future__ import annotations

from pydantic import BaseModel, Field

from skiff.domain.input_types import StrictInput, Text


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
