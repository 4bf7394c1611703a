"""Pods: long-running instances of an image, or of a template, that hold their GPUs until they
are stopped (PodCreateInput of the v1 reference): a notebook, a training run, an inference
server reached on its ports.

A pod's settings (``PodSpec``) are resolved once, at creation: what the create input gives,
else what its template gives, else the reference's defaults. Its ``desiredStatus`` says what
the user asked for (RUNNING, EXITED after a stop, TERMINATED while it is being deleted); where
and how it runs now (``PodPlacement``) is the runner's to record.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Annotated, Any, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

from skiff.domain.endpoints import (
    MAX_ENV_VARS,
    MAX_ID_LENGTH,
    MAX_LIST_ITEMS,
    ComputeType,
    CpuFlavor,
    EnvName,
    EnvValue,
    Name,
)
from skiff.domain.input_types import Bool, Int, StrictInput, Text
from skiff.domain.mount_paths import MOUNT_PATH_DESCRIPTION, check_optional_mount_path
from skiff.domain.templates import (
    MAX_PATH_LENGTH,
    MAX_PORTS,
    MAX_WORDS,
    Port,
    Template,
    Word,
    check_env,
    check_image,
)

#: The reference's defaults.
DEFAULT_NAME = "my pod"
DEFAULT_CONTAINER_DISK_GB = 50
DEFAULT_VOLUME_GB = 20
DEFAULT_MOUNT_PATH = "/workspace"
MAX_DISK_GB = 4000


class DesiredStatus(enum.StrEnum):
    RUNNING = "RUNNING"
    #: Stopped: its instance ended and its GPUs are free; its volume is kept.
    EXITED = "EXITED"
    #: Being deleted: nothing of it is kept once its instance has ended.
    TERMINATED = "TERMINATED"


class PortProtocol(enum.StrEnum):
    http = "http"
    tcp = "tcp"


@dataclass(frozen=True, slots=True)
class PortSpec:
    """``8888/http``: a port the pod's instance listens on, and how it is reached."""

    number: int
    protocol: PortProtocol

    def __str__(self) -> str:
        return f"{self.number}/{self.protocol.value}"


def parse_port(text: str) -> PortSpec:
    """``N/http`` or ``N/tcp`` with N in 1..65535; ``ValueError`` saying what is wrong."""
    number, slash, protocol = text.partition("/")
    if not slash or not number.isdigit() or number.startswith("0"):
        raise ValueError(
            f"port {text!r} is not of the form N/http or N/tcp (for example 8888/http)"
        )
    if protocol not in PortProtocol.__members__:
        raise ValueError(f"port {text!r}: the protocol must be http or tcp")
    if not 1 <= int(number) <= 65535:
        raise ValueError(f"port {text!r}: the port number must be between 1 and 65535")
    return PortSpec(int(number), PortProtocol(protocol))


def _check_ports(value: list[str] | None) -> list[str] | None:
    if value is None:
        return None
    seen: set[int] = set()
    for text in value:
        port = parse_port(text)
        if port.number in seen:
            raise ValueError(f"port {port.number} is listed twice")
        seen.add(port.number)
    return value


Ports = Annotated[list[Port], Field(max_length=MAX_PORTS)]
Words = Annotated[list[Word], Field(max_length=MAX_WORDS)]
Env = Annotated[dict[EnvName, EnvValue], Field(max_length=MAX_ENV_VARS)]
MountPath = Annotated[Text, StringConstraints(min_length=1, max_length=MAX_PATH_LENGTH)]


class _Changeable(StrictInput):
    """What both create and update may set; a field left out (or null) is taken from
    elsewhere: the template on create, the pod as it is on update."""

    name: Text | None = Field(default=None, min_length=1, max_length=191)
    imageName: Text | None = Field(default=None, min_length=1, max_length=1024)
    dockerEntrypoint: Words | None = None
    dockerStartCmd: Words | None = None
    env: Env | None = None
    ports: Ports | None = Field(
        default=None,
        description=(
            "N/http or N/tcp, e.g. 8888/http. A pod run as a process in a sandbox that fences "
            "ports may not declare the ports its host keeps for others (400 naming the port)"
        ),
    )
    containerDiskInGb: Int | None = Field(default=None, ge=0, le=MAX_DISK_GB)
    volumeInGb: Int | None = Field(
        default=None, ge=0, le=MAX_DISK_GB, description="The pod volume, in GB; it never shrinks"
    )
    volumeMountPath: MountPath | None = Field(
        default=None,
        description=MOUNT_PATH_DESCRIPTION + "; the pod volume, or the network volume",
    )
    containerRegistryAuthId: Text | None = Field(default=None, max_length=MAX_ID_LENGTH)
    locked: Bool | None = Field(
        default=None, description="A locked pod refuses stop, restart, reset and delete"
    )

    _env = field_validator("env")(lambda v: v if v is None else check_env(v))
    _image = field_validator("imageName")(check_image)
    _ports = field_validator("ports")(_check_ports)
    _mount = field_validator("volumeMountPath")(check_optional_mount_path)


class PodCreate(_Changeable):
    """PodCreateInput: ``imageName`` or ``templateId`` (or both: the image overrides the
    template's)."""

    templateId: Text | None = Field(default=None, min_length=1, max_length=MAX_ID_LENGTH)
    computeType: ComputeType = ComputeType.GPU
    gpuTypeIds: list[Name] | None = Field(
        default=None, max_length=MAX_LIST_ITEMS, description="GPU types in priority order"
    )
    gpuCount: Int = Field(default=1, ge=1, le=16)
    cpuFlavorIds: list[CpuFlavor] | None = Field(default=None, max_length=len(CpuFlavor))
    vcpuCount: Int = Field(default=2, ge=1, le=512)
    networkVolumeId: Text | None = Field(
        default=None,
        max_length=MAX_ID_LENGTH,
        description="Mounted at volumeMountPath instead of a pod volume",
    )
    dataCenterIds: list[Name] | None = Field(default=None, max_length=MAX_LIST_ITEMS)
    interruptible: Bool = False

    @model_validator(mode="after")
    def _image_or_template(self) -> Self:
        if self.imageName is None and self.templateId is None:
            raise ValueError("give imageName or templateId: a pod needs an image to run")
        return self


class PodUpdate(_Changeable):
    """The create input's changeable fields; a change to what runs restarts the pod."""


class PodSpec(BaseModel):
    """A pod's settings, every one resolved."""

    model_config = ConfigDict(extra="ignore")

    name: str
    imageName: str
    templateId: str | None = None
    computeType: ComputeType = ComputeType.GPU
    gpuTypeIds: list[str] = Field(default_factory=list)
    gpuCount: int = 1
    cpuFlavorIds: list[CpuFlavor] = Field(default_factory=list)
    vcpuCount: int = 2
    env: dict[str, str] = Field(default_factory=dict)
    dockerEntrypoint: list[str] = Field(default_factory=list)
    dockerStartCmd: list[str] = Field(default_factory=list)
    ports: list[str] = Field(default_factory=list)
    containerDiskInGb: int = DEFAULT_CONTAINER_DISK_GB
    volumeInGb: int = DEFAULT_VOLUME_GB
    volumeMountPath: str = DEFAULT_MOUNT_PATH
    networkVolumeId: str | None = None
    containerRegistryAuthId: str | None = None
    dataCenterIds: list[str] = Field(default_factory=list)
    interruptible: bool = False
    locked: bool = False


def spec_from_create(data: PodCreate, template: Template | None) -> PodSpec:
    """The create input over the template over the defaults. Environment variables merge,
    the input's winning, so a pod can add one without repeating the template's."""
    given: dict[str, Any] = data.model_dump(exclude_none=True)
    fields: dict[str, Any] = {}
    if template is not None:
        fields = {
            "imageName": template.imageName,
            "dockerEntrypoint": template.dockerEntrypoint,
            "dockerStartCmd": template.dockerStartCmd,
            "env": dict(template.env),
            "ports": template.ports,
            "containerDiskInGb": template.containerDiskInGb,
            "volumeInGb": template.volumeInGb,
            "volumeMountPath": template.volumeMountPath,
            "containerRegistryAuthId": template.containerRegistryAuthId,
        }
    env = fields.get("env", {}) | given.pop("env", {})
    fields |= given
    fields["env"] = env
    fields.setdefault("name", DEFAULT_NAME)
    return PodSpec.model_validate(fields)


#: Settings whose change needs the pod's instance started again to take effect.
FIELDS_THAT_RESTART = frozenset(
    {
        "imageName",
        "dockerEntrypoint",
        "dockerStartCmd",
        "env",
        "ports",
        "containerDiskInGb",
        "volumeInGb",
        "volumeMountPath",
        "containerRegistryAuthId",
    }
)


def apply_pod_update(current: PodSpec, update: PodUpdate) -> tuple[PodSpec, list[str]]:
    """The settings after ``update``, and the changed ones that need a restart (sorted).
    ``ValueError`` for a volume asked to shrink."""
    changes = update.model_dump(exclude_none=True)
    if changes.get("volumeInGb", current.volumeInGb) < current.volumeInGb:
        raise ValueError(
            f"volumeInGb: a pod volume never shrinks (it is {current.volumeInGb} GB; "
            f"{changes['volumeInGb']} GB was asked)"
        )
    updated = PodSpec.model_validate(current.model_dump() | changes)
    restart = sorted(f for f in FIELDS_THAT_RESTART if getattr(current, f) != getattr(updated, f))
    return updated, restart


class PodPlacement(BaseModel):
    """Where a pod's instance runs now: which replica runs it, on which GPUs, reached on which
    host ports. Empty while it does not run."""

    owner: str | None = None
    gpuName: str | None = None
    gpuIds: list[int] = Field(default_factory=list)
    #: ``"8888/http"`` -> the host port it is published on.
    portMappings: dict[str, int] = Field(default_factory=dict)
    #: The address its ports are reached at when it runs on another machine (a Ray node's);
    #: None: the server's public host.
    host: str | None = None
    #: Why it is not running although it should (no GPU free, a failed pull), else None.
    problem: str | None = None
    #: Being restarted in place: its ports may come back on other host ports.
    restarting: bool = False
    #: The pod's ``version`` and ``restarts`` the running instance reflects: behind the pod's
    #: own, a fresh start or a restart was asked for and is on its way.
    version: int = 0
    restarts: int = 0
    #: The port skiff serves SSH into it on (``SKIFF_SSH_POD_PORTS``), reported as its private
    #: port 22; None: none of its own.
    sshPort: int | None = None


class Pod(BaseModel):
    """A pod as the store keeps it."""

    id: str
    userId: str
    spec: PodSpec
    desiredStatus: DesiredStatus
    createdAt: float
    lastStatusChange: float
    lastStartedAt: float | None = None
    #: Bumped by every change that needs a fresh instance (an update of what runs, a reset):
    #: the runner compares it with the one its instance started with.
    version: int = 1
    #: Bumped by each ``restart`` (in place: the instance keeps its disk).
    restarts: int = 0
    placement: PodPlacement = Field(default_factory=PodPlacement)


def runtime_status(pod: Pod) -> str:
    """What runs now, in a word (the API's ``status``, the console's): running, restarting,
    starting, waiting (see ``placement.problem``), stopping, stopped, terminating."""
    if pod.desiredStatus is DesiredStatus.TERMINATED:
        return "terminating"
    if pod.desiredStatus is DesiredStatus.EXITED:
        return "stopping" if pod.placement.owner else "stopped"
    placement = pod.placement
    if placement.owner:
        if placement.version != pod.version:
            return "starting"  # a fresh instance replaces this one (an update, a reset)
        if placement.restarting or placement.restarts != pod.restarts:
            return "restarting"
        return "running"
    return "waiting" if pod.placement.problem else "starting"
