"""Billing as a user reads it: their usages (recorded by the meter, ``metering.py``) over a
range, in UTC buckets, grouped and priced at the operator's table (``SKIFF_PRICES``), and what
a pod costs per hour now (its ``costPerHr``)."""

from __future__ import annotations

from dataclasses import dataclass

from attrs import define

from skiff.clock import Clock
from skiff.domain.billing import (
    GROUPINGS,
    BadQuery,
    BillingQuery,
    BillingRecord,
    BucketSize,
    Prices,
    Resource,
    Usage,
    UsageKind,
    parse_query,
    records,
)
from skiff.domain.endpoints import ComputeType, Endpoint
from skiff.domain.pods import Pod
from skiff.domain.users import User
from skiff.errors import Invalid
from skiff.store.base import Store


@dataclass(frozen=True, slots=True)
class Spend:
    """A record, with what it is of: an endpoint's, a pod's or a network volume's (its id)."""

    resource: Resource
    thing_id: str
    record: BillingRecord


@define(eq=False, repr=False, slots=False)
class Billing:
    _store: Store
    _clock: Clock
    prices: Prices

    def query(self, resource: Resource, **params: str | None) -> BillingQuery:
        """The route's query parameters, checked (400 naming the one that cannot be
        answered)."""
        try:
            return parse_query(resource, self._clock.now(), **params)
        except BadQuery as exc:
            raise Invalid(str(exc), field=exc.field) from None

    async def records(self, user: User, query: BillingQuery) -> list[BillingRecord]:
        """The user's records for ``query``: theirs alone, whoever asks."""
        usages = await self._store.usages_of(user.id, query.start, query.end)
        kept = [u for u in usages if query.keeps(u)]
        return records(
            kept,
            query.start,
            query.end,
            query.size,
            query.grouping,
            self.prices,
            self._clock.now(),
        )

    def worker_cost_per_hour(self, endpoint: Endpoint) -> float:
        """What one worker of the endpoint costs per hour at the table: its GPUs (of the first
        type it lists, the one it gets when free) or its vCPUs."""
        spec = endpoint.spec
        if spec.computeType is ComputeType.GPU:
            gpu = spec.gpuTypeIds[0] if spec.gpuTypeIds else None
            usage = Usage(
                "", endpoint.userId, UsageKind.WORKER, 0.0, gpu_type=gpu, gpu_count=spec.gpuCount
            )
        else:
            usage = Usage("", endpoint.userId, UsageKind.WORKER, 0.0, vcpus=spec.vcpuCount)
        return self.prices.hourly(usage)

    async def spend(self, user: User, start: float, end: float, size: BucketSize) -> list[Spend]:
        """Every record of the user's endpoints, pods and network volumes over ``[start,
        end)``, each named by what it is (the console's chart, table and CSV)."""
        found: list[Spend] = []
        for resource in Resource:
            grouping = GROUPINGS[resource][0]
            query = BillingQuery(resource, start, end, size, grouping)
            for record in await self.records(user, query):
                thing = record.endpointId or record.podId or record.networkVolumeId or ""
                found.append(Spend(resource, thing, record))
        return sorted(found, key=lambda s: (s.record.time, s.resource.value, s.thing_id))

    def pod_cost_per_hour(self, pod: Pod) -> float:
        """What the pod costs per hour at the table: its GPUs or vCPUs while it runs (the GPUs
        it holds, else those it asks for), and its volume always."""
        spec = pod.spec
        if spec.computeType is ComputeType.GPU:
            gpu = pod.placement.gpuName or (spec.gpuTypeIds[0] if spec.gpuTypeIds else None)
            count = len(pod.placement.gpuIds) or spec.gpuCount
            compute = Usage("", pod.userId, UsageKind.POD, 0.0, gpu_type=gpu, gpu_count=count)
        else:
            compute = Usage("", pod.userId, UsageKind.POD, 0.0, vcpus=spec.vcpuCount)
        volume_gb = spec.volumeInGb if spec.networkVolumeId is None else 0
        storage = Usage("", pod.userId, UsageKind.POD_VOLUME, 0.0, disk_gb=volume_gb)
        return self.prices.hourly(compute) + self.prices.hourly(storage)
