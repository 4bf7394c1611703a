"""Templates: what a worker runs. The local provider runs ``dockerEntrypoint + dockerStartCmd``
as a process on the host; ``imageName`` is kept for providers that run containers."""

from __future__ import annotations

import enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator


class TemplateCategory(enum.StrEnum):
    NVIDIA = "NVIDIA"
    AMD = "AMD"
    CPU = "CPU"


def _check_env(value: dict[str, str]) -> dict[str, str]:
    for key in value:
        if not key or "=" in key or "\0" in key:
            raise ValueError(f"invalid environment variable name: {key!r}")
    return value


class TemplateUpdate(BaseModel):
    """Every field optional; ``category`` and ``isServerless`` are fixed at creation."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, min_length=1, max_length=191)
    imageName: str | None = Field(default=None, min_length=1, max_length=1024)
    containerDiskInGb: int | None = Field(default=None, ge=0, le=4000)
    volumeInGb: int | None = Field(default=None, ge=0, le=4000)
    volumeMountPath: str | None = None
    dockerEntrypoint: list[str] | None = None
    dockerStartCmd: list[str] | None = None
    env: dict[str, str] | None = None
    ports: list[str] | None = None
    isPublic: bool | None = None
    readme: str | None = None
    containerRegistryAuthId: str | None = None

    _env = field_validator("env")(lambda v: v if v is None else _check_env(v))


class TemplateCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=191)
    imageName: str = Field(min_length=1, max_length=1024)
    category: TemplateCategory = TemplateCategory.NVIDIA
    containerDiskInGb: int = Field(default=50, ge=0, le=4000)
    volumeInGb: int = Field(default=20, ge=0, le=4000)
    volumeMountPath: str = "/workspace"
    dockerEntrypoint: list[str] = Field(default_factory=list)
    dockerStartCmd: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    ports: list[str] = Field(default_factory=list)
    isPublic: bool = False
    isServerless: bool = False
    readme: str = ""
    containerRegistryAuthId: str | None = None

    _env = field_validator("env")(_check_env)


class Template(TemplateCreate):
    model_config = ConfigDict(extra="ignore")

    id: str


def apply_template_update(current: Template, update: TemplateUpdate) -> Template:
    changes: dict[str, Any] = update.model_dump(exclude_unset=True)
    return current.model_copy(update=changes)


#: Template fields whose change means running workers no longer match.
TEMPLATE_FIELDS_THAT_ROLL_WORKERS = frozenset(
    {"imageName", "dockerEntrypoint", "dockerStartCmd", "env", "containerRegistryAuthId"}
)
