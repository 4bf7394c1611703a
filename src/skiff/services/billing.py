"""Billing as a user reads it: their usages (recorded by the meter, ``metering.py``) over a
range, in UTC buckets, grouped and priced at the operator's table (``SKIFF_PRICES``), and what
a pod costs per hour now (its ``costPerHr``)."""

from __future__ import annotations

from skiff.clock import Clock
from skiff.domain.billing import (
    BadQuery,
    BillingQuery,
    BillingRecord,
    Prices,
    Resource,
    Usage,
    UsageKind,
    parse_query,
    records,
)
from skiff.domain.endpoints import ComputeType
from skiff.domain.pods import Pod
from skiff.domain.users import User
from skiff.errors import Invalid
from skiff.store.base import Store


class Billing:
    def __init__(self, store: Store, clock: Clock, prices: Prices) -> None:
        self._store = store
        self._clock = clock
        self.prices = prices

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
