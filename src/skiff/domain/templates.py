"""Templates: what a worker runs. The local provider runs ``dockerEntrypoint + dockerStartCmd``
as a process on the host; ``imageName`` is kept for providers that run containers."""

from __future__ import annotations

import enum
from typing import Annotated, Any

from pydantic import ConfigDict, Field, StringConstraints, field_validator

from skiff.domain.endpoints import MAX_ENV_VARS, MAX_ID_LENGTH, EnvName, EnvValue
from skiff.domain.image_references import image_reference_problem
from skiff.domain.input_types import Bool, Int, StrictInput, Text
from skiff.domain.mount_paths import MOUNT_PATH_DESCRIPTION, check_mount_path

#: skiff's own bounds (the v1 reference names none).
MAX_WORDS = 1000
MAX_PORTS = 100
MAX_PATH_LENGTH = 4096
MAX_README_LENGTH = 65536
#: One word of a command line.
Word = Annotated[Text, StringConstraints(max_length=32768)]
#: ``8888/http`` and the like.
Port = Annotated[Text, StringConstraints(max_length=64)]


class TemplateCategory(enum.StrEnum):
    NVIDIA = "NVIDIA"
    AMD = "AMD"
    CPU = "CPU"


def check_env(value: dict[str, str]) -> dict[str, str]:
    for key in value:
        if not key or "=" in key or "\0" in key:
            raise ValueError(f"invalid environment variable name: {key!r}")
    return value


def check_image(value: str | None) -> str | None:
    problem = None if value is None else image_reference_problem(value)
    if problem is not None:
        raise ValueError(f"{value!r} is not a valid image reference: it {problem}")
    return value


def _mount_path_given(value: str | None) -> str:
    # Only an explicit null gets here (a field left out is not validated): an update stores
    # what it is given, and a template without a mount path would no longer load.
    if value is None:
        raise ValueError("cannot be null: leave it out to keep the template's")
    return check_mount_path(value)


class TemplateUpdate(StrictInput):
    """Every field optional; ``category`` and ``isServerless`` are fixed at creation. Types are
    strict (``domain/input_types.py``); the bounds are skiff's own, shown in the OpenAPI
    description."""

    name: Text | None = Field(default=None, min_length=1, max_length=191)
    imageName: Text | None = Field(default=None, min_length=1, max_length=1024)
    containerDiskInGb: Int | None = Field(default=None, ge=0, le=4000)
    volumeInGb: Int | None = Field(default=None, ge=0, le=4000)
    volumeMountPath: Text | None = Field(
        default=None, max_length=MAX_PATH_LENGTH, description=MOUNT_PATH_DESCRIPTION
    )
    dockerEntrypoint: list[Word] | None = Field(default=None, max_length=MAX_WORDS)
    dockerStartCmd: list[Word] | None = Field(default=None, max_length=MAX_WORDS)
    env: dict[EnvName, EnvValue] | None = Field(default=None, max_length=MAX_ENV_VARS)
    ports: list[Port] | None = Field(default=None, max_length=MAX_PORTS)
    isPublic: Bool | None = None
    readme: Text | None = Field(default=None, max_length=MAX_README_LENGTH)
    containerRegistryAuthId: Text | None = Field(default=None, max_length=MAX_ID_LENGTH)

    _env = field_validator("env")(lambda v: v if v is None else check_env(v))
    _image = field_validator("imageName")(check_image)
    _mount = field_validator("volumeMountPath")(_mount_path_given)


class TemplateCreate(StrictInput):
    name: Text = Field(min_length=1, max_length=191)
    imageName: Text = Field(min_length=1, max_length=1024)
    category: TemplateCategory = TemplateCategory.NVIDIA
    containerDiskInGb: Int = Field(default=50, ge=0, le=4000)
    volumeInGb: Int = Field(default=20, ge=0, le=4000)
    volumeMountPath: Text = Field(
        default="/workspace", max_length=MAX_PATH_LENGTH, description=MOUNT_PATH_DESCRIPTION
    )
    dockerEntrypoint: list[Word] = Field(default_factory=list, max_length=MAX_WORDS)
    dockerStartCmd: list[Word] = Field(default_factory=list, max_length=MAX_WORDS)
    env: dict[EnvName, EnvValue] = Field(default_factory=dict, max_length=MAX_ENV_VARS)
    ports: list[Port] = Field(default_factory=list, max_length=MAX_PORTS)
    isPublic: Bool = False
    isServerless: Bool = False
    readme: Text = Field(default="", max_length=MAX_README_LENGTH)
    containerRegistryAuthId: Text | None = Field(default=None, max_length=MAX_ID_LENGTH)

    _env = field_validator("env")(check_env)
    _image = field_validator("imageName")(check_image)
    _mount = field_validator("volumeMountPath")(check_mount_path)


class Template(TemplateCreate):
    model_config = ConfigDict(extra="ignore")

    id: str

    @field_validator("*", mode="before")
    @classmethod
    def _storable(cls, value: Any) -> Any:
        # A stored template was checked when it came in: rows written before a check was
        # added still load, so a listing never fails on one.
        return value

    # A template stored before references were checked still loads (and fails its pull).
    _image = field_validator("imageName")(lambda v: v)
    # As does one stored before mount paths were checked: a pod made from it is refused
    # instead (services/pods.py), naming the template.
    _mount = field_validator("volumeMountPath")(lambda v: v)


def apply_template_update(current: Template, update: TemplateUpdate) -> Template:
    changes: dict[str, Any] = update.model_dump(exclude_unset=True)
    return current.model_copy(update=changes)


#: Template fields whose change means running workers no longer match.
TEMPLATE_FIELDS_THAT_ROLL_WORKERS = frozenset(
    {"imageName", "dockerEntrypoint", "dockerStartCmd", "env", "containerRegistryAuthId"}
)
