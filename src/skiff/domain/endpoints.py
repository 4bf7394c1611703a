"""Endpoints: their settings, defaults and limits (EndpointCreateInput of the v1 reference)."""

from __future__ import annotations

import enum
from typing import Annotated, Any, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

from skiff.domain import instance_ids
from skiff.domain.input_types import Bool, Int, StrictInput, Text
from skiff.domain.jobs import EXECUTION_TIMEOUT_MIN_MS, SEVEN_DAYS_MS

#: skiff's own bounds where the v1 reference names none.
SCALER_VALUE_MAX = 3600
MAX_ID_LENGTH = 191
MAX_LIST_ITEMS = 64
MAX_ENV_VARS = 1000
#: A name in a list (a GPU type, a data center, a CUDA version).
Name = Annotated[Text, StringConstraints(max_length=191)]
EnvName = Annotated[Text, StringConstraints(max_length=1024)]
EnvValue = Annotated[Text, StringConstraints(max_length=32768)]
#: A CPU instance id, ``cpu3c-2-4`` (``domain/instance_ids``).
InstanceIdText = Annotated[Text, StringConstraints(pattern=instance_ids.PATTERN)]
MAX_INSTANCE_IDS = 8


class ComputeType(enum.StrEnum):
    GPU = "GPU"
    CPU = "CPU"


class EndpointType(enum.StrEnum):
    """How an endpoint is called (the create input's ``type``, fixed once created)."""

    #: Queue-based: jobs through ``/v2/{id}/run`` and the rest, taken by handler workers.
    QB = "QB"
    #: Load balancing: any request to ``/lb/{id}/...`` passed straight to one ready worker,
    #: which is its own HTTP server (``PORT``, ``GET /ping`` on ``PORT_HEALTH``).
    LB = "LB"


class ScalerType(enum.StrEnum):
    #: Add a worker when a job has waited longer than ``scalerValue`` seconds.
    QUEUE_DELAY = "QUEUE_DELAY"
    #: Aim at ``ceil((inQueue + inProgress) / scalerValue)`` workers.
    REQUEST_COUNT = "REQUEST_COUNT"


class CpuFlavor(enum.StrEnum):
    cpu3c = "cpu3c"
    cpu3g = "cpu3g"
    cpu5c = "cpu5c"
    cpu5g = "cpu5g"


def _unique_names(value: list[str] | None, what: str) -> list[str] | None:
    if value is None:
        return None
    for item in value:
        if not item.strip():
            raise ValueError(f"{what} must not contain empty names")
    if len(set(value)) != len(value):
        raise ValueError(f"{what} must not repeat a name")
    return value


class _EndpointSettings(StrictInput):
    """Fields shared by create and update; every one optional here.

    Types are strict (``domain/input_types.py``). Where the v1 reference gives no bound, the
    ones here are skiff's own, and the OpenAPI description shows every one of them."""

    name: Text | None = Field(default=None, min_length=1, max_length=191)
    templateId: Text | None = Field(default=None, min_length=1, max_length=MAX_ID_LENGTH)
    gpuTypeIds: list[Name] | None = Field(
        default=None, max_length=MAX_LIST_ITEMS, description="GPU types in priority order"
    )
    gpuCount: Int | None = Field(default=None, ge=1, le=16)
    cpuFlavorIds: list[CpuFlavor] | None = Field(default=None, max_length=len(CpuFlavor))
    vcpuCount: Int | None = Field(default=None, ge=1, le=512)
    instanceIds: list[InstanceIdText] | None = Field(
        default=None,
        max_length=MAX_INSTANCE_IDS,
        description="CPU endpoints: instance ids such as cpu3c-2-4 (flavor-vCPUs-GB of memory; "
        f"at most {instance_ids.MAX_VCPUS} vCPUs and {instance_ids.MAX_MEMORY_GB} GB), in "
        "priority order; the first sets the workers' vCPUs, memory and flavor",
    )
    dataCenterIds: list[Name] | None = Field(default=None, max_length=MAX_LIST_ITEMS)
    allowedCudaVersions: list[Name] | None = Field(default=None, max_length=MAX_LIST_ITEMS)
    executionTimeoutMs: Int | None = Field(
        default=None, ge=EXECUTION_TIMEOUT_MIN_MS, le=SEVEN_DAYS_MS
    )
    flashboot: Bool | None = None
    idleTimeout: Int | None = Field(default=None, ge=1, le=3600, description="Seconds")
    scalerType: ScalerType | None = None
    scalerValue: Int | None = Field(
        default=None,
        ge=1,
        le=SCALER_VALUE_MAX,
        description="Seconds of queue delay (QUEUE_DELAY) or jobs per worker (REQUEST_COUNT)",
    )
    workersMin: Int | None = Field(default=None, ge=0, le=1000)
    workersMax: Int | None = Field(default=None, ge=0, le=1000)
    networkVolumeId: Text | None = Field(default=None, max_length=MAX_ID_LENGTH)
    env: dict[EnvName, EnvValue] | None = Field(default=None, max_length=MAX_ENV_VARS)

    @field_validator("gpuTypeIds")
    @classmethod
    def _gpu_types(cls, value: list[str] | None) -> list[str] | None:
        return _unique_names(value, "gpuTypeIds")

    @field_validator("instanceIds")
    @classmethod
    def _instance_ids(cls, value: list[str] | None) -> list[str] | None:
        # The pattern has checked each one's shape; its numbers are checked here so that the
        # refusal says which bound was passed rather than repeating the pattern.
        for given in value or []:
            parsed = instance_ids.shape(given)
            too_big = instance_ids.out_of_bounds(parsed) if parsed is not None else None
            if too_big is not None:
                raise ValueError(too_big)
        return _unique_names(value, "instanceIds")

    @model_validator(mode="after")
    def _min_not_above_max(self) -> Self:
        if (
            self.workersMin is not None
            and self.workersMax is not None
            and self.workersMin > self.workersMax
        ):
            raise ValueError("workersMin must not be greater than workersMax")
        return self


class EndpointCreate(_EndpointSettings):
    templateId: Text = Field(min_length=1, max_length=MAX_ID_LENGTH)
    computeType: ComputeType = ComputeType.GPU
    type: EndpointType = Field(
        default=EndpointType.QB,
        description="QB: queue-based (jobs through /v2/{id}/run...); LB: load balancing "
        "(requests to /lb/{id}/... passed to the workers' own HTTP servers, which listen on "
        "PORT and answer GET /ping on PORT_HEALTH; scaled by REQUEST_COUNT). Fixed once created",
    )


class EndpointUpdate(_EndpointSettings):
    """The create input, all optional, without ``computeType``."""


class EndpointSpec(BaseModel):
    """An endpoint's stored settings, every default filled in."""

    model_config = ConfigDict(extra="ignore")

    name: str
    templateId: str
    computeType: ComputeType = ComputeType.GPU
    type: EndpointType = EndpointType.QB
    gpuTypeIds: list[str] = Field(default_factory=list)
    gpuCount: int = 1
    cpuFlavorIds: list[CpuFlavor] = Field(default_factory=list)
    vcpuCount: int = 2
    instanceIds: list[str] = Field(
        default_factory=list,
        description="CPU endpoints: instance ids (cpu3c-2-4: flavor-vCPUs-GB), the first sizing "
        "the workers; shown as the one vcpuCount and the flavor amount to when none were given",
    )
    dataCenterIds: list[str] = Field(default_factory=list)
    allowedCudaVersions: list[str] = Field(default_factory=list)
    executionTimeoutMs: int = 600_000
    flashboot: bool = False
    idleTimeout: int = 5
    scalerType: ScalerType = ScalerType.QUEUE_DELAY
    scalerValue: int = 4
    workersMin: int = 0
    workersMax: int = 3
    networkVolumeId: str | None = None
    env: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _min_not_above_max(self) -> Self:
        if self.workersMin > self.workersMax:
            raise ValueError("workersMin must not be greater than workersMax")
        return self

    @model_validator(mode="after")
    def _balanced_by_requests(self) -> Self:
        if self.type is EndpointType.LB and self.scalerType is not ScalerType.REQUEST_COUNT:
            raise ValueError(
                "scalerType: a load-balancing endpoint scales by REQUEST_COUNT (requests in "
                "flight per worker)"
            )
        return self

    @model_validator(mode="after")
    def _instance_decides_cpus(self) -> Self:
        """The first instance id sets vCPUs and flavor, so that the settings never claim 2
        vCPUs for a ``cpu3c-8-16`` endpoint."""
        if self.instanceIds:
            first = instance_ids.parse(self.instanceIds[0])
            if first is not None:
                self.vcpuCount = first.vcpus
                self.cpuFlavorIds = [CpuFlavor(first.flavor)]
        return self


def spec_from_create(data: EndpointCreate, default_name: str) -> EndpointSpec:
    fields: dict[str, Any] = data.model_dump(exclude_none=True)
    fields.setdefault("name", default_name)
    if data.type is EndpointType.LB:
        # Requests in flight are the only load a load-balancing endpoint has.
        fields.setdefault("scalerType", ScalerType.REQUEST_COUNT)
    return EndpointSpec.model_validate(fields)


def apply_endpoint_update(current: EndpointSpec, update: EndpointUpdate) -> EndpointSpec:
    """The merged settings; validated as a whole so min/max are checked against each other.

    ``null`` clears a field that may be empty (``networkVolumeId``) and leaves any other
    unchanged, so a client that sends every field of a form back does no harm."""
    changes = {
        k: v
        for k, v in update.model_dump(exclude_unset=True).items()
        if v is not None or k in NULLABLE_FIELDS
    }
    merged = current.model_dump() | changes
    resized = any(
        k in changes and changes[k] != before
        for k, before in (
            ("vcpuCount", current.vcpuCount),
            ("cpuFlavorIds", current.cpuFlavorIds),
        )
    )
    if resized and "instanceIds" not in changes:
        # Sized by vCPUs now: the instance ids kept would size the workers over again.
        merged["instanceIds"] = []
    return EndpointSpec.model_validate(merged)


#: Settings an update may clear with ``null``.
NULLABLE_FIELDS = frozenset({"networkVolumeId"})


#: Endpoint fields whose change means running workers no longer match the endpoint (a
#: worker's network volume is mounted when it starts, so attaching one needs new workers).
FIELDS_THAT_ROLL_WORKERS = frozenset(
    {
        "templateId",
        "env",
        "gpuTypeIds",
        "gpuCount",
        "computeType",
        "cpuFlavorIds",
        "vcpuCount",
        "instanceIds",
        "networkVolumeId",
    }
)


def rolls_workers(before: EndpointSpec, after: EndpointSpec) -> bool:
    return any(getattr(before, f) != getattr(after, f) for f in FIELDS_THAT_ROLL_WORKERS)


class Endpoint(BaseModel):
    """An endpoint as the store keeps it."""

    id: str
    userId: str
    version: int
    createdAt: float
    spec: EndpointSpec
    #: Not stored: on the copy a public model's caller other than its owner gets
    #: (``Endpoints.for_jobs``), that caller's user id: their jobs are recorded and read as
    #: theirs alone.
    caller: str | None = Field(default=None, exclude=True)
