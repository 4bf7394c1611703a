"""``/v1/billing``: the reference's billing routes (endpoints, pods, network volumes), each a
list of records per UTC bucket and group, the caller's own usage alone."""

import dataclasses
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, Field

from skiff.api.needs import needs
from skiff.domain import times
from skiff.domain.billing import BillingRecord, BucketSize, Resource
from skiff.domain.permissions import READ
from skiff.domain.users import User
from skiff.services.hub import Services


class BillingRecordOut(BaseModel):
    time: str = Field(description="The bucket's start (ISO-8601, UTC)")
    amount: float = Field(description="USD at the operator's price table (SKIFF_PRICES)")
    timeBilledMs: int = Field(
        description="Compute time billed in the bucket (network volumes: storage time)"
    )
    diskSpaceBilledGb: int = Field(description="The most GB of volume billed in the bucket")
    endpointId: str | None = None
    podId: str | None = Field(
        default=None, description="A pod's id; in endpoint records, a serverless worker's"
    )
    gpuTypeId: str | None = None
    networkVolumeId: str | None = Field(default=None, description="skiff's own")


def record_out(record: BillingRecord) -> BillingRecordOut:
    # The record's own fields, under the same names: only its time and amount are shown apart.
    shown = dataclasses.asdict(record) | {
        "time": times.iso(record.time),
        "amount": round(record.amount, 6),
    }
    return BillingRecordOut(**shown)


BAD: dict[int | str, dict[str, Any]] = {
    400: {"description": "A query parameter cannot be answered; `field` names it"}
}
_TIME = "RFC 3339 (UTC if it names no zone); default: the last 30 days to now"


class Buckets(BaseModel):
    """The query parameters every billing route takes, the buckets' size and the time they
    span, before each route's own filters (its subclass's fields). Query models, whose fields
    FastAPI lists in the OpenAPI description in this order, as the routes always had them."""

    bucketSize: BucketSize | None = Field(
        default=None, description="hour, day (the default), week, month or year (UTC)"
    )
    startTime: str | None = Field(default=None, description=_TIME)
    endTime: str | None = Field(default=None, description=_TIME)

    def params(self) -> dict[str, str | None]:
        """What ``BillingService.query`` takes: the buckets, and the filters by their names."""
        filters = self.model_dump(exclude={"bucketSize", "startTime", "endTime"})
        return {
            "bucket_size": self.bucketSize,
            "start_time": self.startTime,
            "end_time": self.endTime,
            **filters,
        }


class EndpointBilling(Buckets):
    grouping: str | None = Field(
        default=None, description="endpointId (the default), podId or gpuTypeId"
    )
    endpointId: str | None = None
    podId: str | None = None
    gpuTypeId: str | None = None


class PodBilling(Buckets):
    grouping: str | None = Field(default=None, description="podId (the default) or gpuTypeId")
    podId: str | None = None
    gpuTypeId: str | None = None


class NetworkVolumeBilling(Buckets):
    networkVolumeId: str | None = None


def router(services: Services, user_dep: Any) -> APIRouter:
    billing = APIRouter(prefix="/billing", tags=["billing"])
    UserDep = Annotated[User, Depends(user_dep)]

    async def answer(user: User, resource: Resource, asked: Buckets) -> list[Any]:
        query = services.billing.query(resource, **asked.params())
        return [record_out(r) for r in await services.billing.records(user, query)]

    @billing.get("/endpoints", response_model=list[BillingRecordOut], responses=BAD)
    @needs(READ)
    async def endpoint_billing(
        user: UserDep, asked: Annotated[EndpointBilling, Query()]
    ) -> list[Any]:
        """Your serverless workers' time: from each worker's start until it is gone (a
        flashboot standby counts, as it holds its GPU; a throttled worker holds nothing), per
        bucket and group, at most 1,000 buckets."""
        return await answer(user, Resource.ENDPOINTS, asked)

    @billing.get("/pods", response_model=list[BillingRecordOut], responses=BAD)
    @needs(READ)
    async def pod_billing(user: UserDep, asked: Annotated[PodBilling, Query()]) -> list[Any]:
        """Your pods: each instance's time while it runs, and its volume's storage until the
        pod is deleted, stopped or not, per bucket and group."""
        return await answer(user, Resource.PODS, asked)

    @billing.get("/networkvolumes", response_model=list[BillingRecordOut], responses=BAD)
    @needs(READ)
    async def network_volume_billing(
        user: UserDep, asked: Annotated[NetworkVolumeBilling, Query()]
    ) -> list[Any]:
        """Your network volumes' storage, per volume and bucket (GB-months at the table)."""
        return await answer(user, Resource.NETWORK_VOLUMES, asked)

    return billing
