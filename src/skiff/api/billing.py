"""``/v1/billing``: the reference's billing routes (endpoints, pods, network volumes), each a
list of records per UTC bucket and group, the caller's own usage alone."""

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
    return BillingRecordOut(
        time=times.iso(record.time),
        amount=round(record.amount, 6),
        timeBilledMs=record.timeBilledMs,
        diskSpaceBilledGb=record.diskSpaceBilledGb,
        endpointId=record.endpointId,
        podId=record.podId,
        gpuTypeId=record.gpuTypeId,
        networkVolumeId=record.networkVolumeId,
    )


BAD: dict[int | str, dict[str, Any]] = {
    400: {"description": "A query parameter cannot be answered; `field` names it"}
}
_TIME = "RFC 3339 (UTC if it names no zone); default: the last 30 days to now"


class Buckets(BaseModel):
    """The query parameters every billing route takes: the buckets' size and the time they
    span. A query model, so that each route's own filters follow them in the OpenAPI
    description as they always have (a dependency's parameters would come after)."""

    bucketSize: BucketSize | None = Field(
        default=None, description="hour, day (the default), week, month or year (UTC)"
    )
    startTime: str | None = Field(default=None, description=_TIME)
    endTime: str | None = Field(default=None, description=_TIME)


BucketsQuery = Annotated[Buckets, Query()]


def router(services: Services, user_dep: Any) -> APIRouter:
    billing = APIRouter(prefix="/billing", tags=["billing"])
    UserDep = Annotated[User, Depends(user_dep)]

    async def answer(
        user: User, resource: Resource, buckets: Buckets, **params: str | None
    ) -> list[Any]:
        query = services.billing.query(
            resource,
            bucket_size=buckets.bucketSize,
            start_time=buckets.startTime,
            end_time=buckets.endTime,
            **params,
        )
        return [record_out(r) for r in await services.billing.records(user, query)]

    @billing.get("/endpoints", response_model=list[BillingRecordOut], responses=BAD)
    @needs(READ)
    async def endpoint_billing(
        user: UserDep,
        buckets: BucketsQuery,
        grouping: Annotated[
            str | None, Query(description="endpointId (the default), podId or gpuTypeId")
        ] = None,
        endpointId: str | None = None,
        podId: str | None = None,
        gpuTypeId: str | None = None,
    ) -> list[Any]:
        """Your serverless workers' time: from each worker's start until it is gone (a
        flashboot standby counts, as it holds its GPU; a throttled worker holds nothing), per
        bucket and group, at most 1,000 buckets."""
        return await answer(
            user,
            Resource.ENDPOINTS,
            buckets,
            grouping=grouping,
            endpointId=endpointId,
            podId=podId,
            gpuTypeId=gpuTypeId,
        )

    @billing.get("/pods", response_model=list[BillingRecordOut], responses=BAD)
    @needs(READ)
    async def pod_billing(
        user: UserDep,
        buckets: BucketsQuery,
        grouping: Annotated[
            str | None, Query(description="podId (the default) or gpuTypeId")
        ] = None,
        podId: str | None = None,
        gpuTypeId: str | None = None,
    ) -> list[Any]:
        """Your pods: each instance's time while it runs, and its volume's storage until the
        pod is deleted, stopped or not, per bucket and group."""
        return await answer(
            user,
            Resource.PODS,
            buckets,
            grouping=grouping,
            podId=podId,
            gpuTypeId=gpuTypeId,
        )

    @billing.get("/networkvolumes", response_model=list[BillingRecordOut], responses=BAD)
    @needs(READ)
    async def network_volume_billing(
        user: UserDep,
        buckets: BucketsQuery,
        networkVolumeId: str | None = None,
    ) -> list[Any]:
        """Your network volumes' storage, per volume and bucket (GB-months at the table)."""
        return await answer(
            user,
            Resource.NETWORK_VOLUMES,
            buckets,
            networkVolumeId=networkVolumeId,
        )

    return billing
