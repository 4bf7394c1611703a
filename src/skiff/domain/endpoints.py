"""Endpoints: their settings, defaults and limits (EndpointCreateInput of the v1 reference)."""

from __future__ import annotations

import enum
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from skiff.domain.jobs import EXECUTION_TIMEOUT_MIN_MS, SEVEN_DAYS_MS


class ComputeType(enum.StrEnum):
    GPU = "GPU"
    CPU = "CPU"


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


class _EndpointSettings(BaseModel):
    """Fields shared by create and update; every one optional here."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, min_length=1, max_length=191)
    templateId: str | None = Field(default=None, min_length=1)
    gpuTypeIds: list[str] | None = Field(default=None, description="GPU types in priority order")
    gpuCount: int | None = Field(default=None, ge=1, le=16)
    cpuFlavorIds: list[CpuFlavor] | None = None
    vcpuCount: int | None = Field(default=None, ge=1, le=512)
    dataCenterIds: list[str] | None = None
    allowedCudaVersions: list[str] | None = None
    executionTimeoutMs: int | None = Field(
        default=None, ge=EXECUTION_TIMEOUT_MIN_MS, le=SEVEN_DAYS_MS
    )
    flashboot: bool | None = None
    idleTimeout: int | None = Field(default=None, ge=1, le=3600, description="Seconds")
    scalerType: ScalerType | None = None
    scalerValue: int | None = Field(default=None, ge=1)
    workersMin: int | None = Field(default=None, ge=0, le=1000)
    workersMax: int | None = Field(default=None, ge=0, le=1000)
    networkVolumeId: str | None = None
    env: dict[str, str] | None = None

    @field_validator("gpuTypeIds")
    @classmethod
    def _gpu_types(cls, value: list[str] | None) -> list[str] | None:
        return _unique_names(value, "gpuTypeIds")

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
    templateId: str = Field(min_length=1)
    computeType: ComputeType = ComputeType.GPU


class EndpointUpdate(_EndpointSettings):
    """The create input, all optional, without ``computeType``."""


class EndpointSpec(BaseModel):
    """An endpoint's stored settings, every default filled in."""

    model_config = ConfigDict(extra="ignore")

    name: str
    templateId: str
    computeType: ComputeType = ComputeType.GPU
    gpuTypeIds: list[str] = Field(default_factory=list)
    gpuCount: int = 1
    cpuFlavorIds: list[CpuFlavor] = Field(default_factory=list)
    vcpuCount: int = 2
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


def spec_from_create(data: EndpointCreate, default_name: str) -> EndpointSpec:
    fields: dict[str, Any] = data.model_dump(exclude_none=True)
    fields.setdefault("name", default_name)
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
    return EndpointSpec.model_validate(current.model_dump() | changes)


#: Settings an update may clear with ``null``.
NULLABLE_FIELDS = frozenset({"networkVolumeId"})


#: Endpoint fields whose change means running workers no longer match the endpoint.
FIELDS_THAT_ROLL_WORKERS = frozenset(
    {"templateId", "env", "gpuTypeIds", "gpuCount", "computeType", "cpuFlavorIds", "vcpuCount"}
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
