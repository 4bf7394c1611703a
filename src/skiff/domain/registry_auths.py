"""Container registry credentials: the password is kept and never shown back."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class RegistryAuthCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=191, description="Unique per owner")
    username: str = Field(min_length=1, max_length=1024)
    password: str = Field(min_length=1, max_length=8192, description="Stored; never returned")


class RegistryAuth(BaseModel):
    id: str
    name: str
