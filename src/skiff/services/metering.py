"""The meter: usage recorded as it happens, for billing (``domain/billing.py``).

A leader loop. Each pass reads what holds resources now — every local worker that holds its GPUs
or vCPUs (any state but throttled and unhealthy: a flashboot standby holds its GPU and counts),
every pod instance placed, every pod volume and network volume — and makes the store's open
usages match: one opened for each new thing (from the moment it started), one ended for each
thing gone or changed (a volume grown is a new usage at its new size), and every open one
marked seen. Where skiff knows the exact moment a thing ended (a worker removed, a pod stopped
or exited, a volume deleted) that moment ends its usage at once (``ended``), so a pass only
catches what no hook saw.

What the store guarantees: at most one open usage per subject, so two replicas that both think
they lead for a moment, or a hook and a pass, never count a second twice. A server killed
outright leaves its usages open; the next leader, as it takes the lead, ends those not seen for
two passes where they were last seen, and opens usages again for what still runs from then on:
the time no server metered (a few seconds on a failover) is not billed.

A public model's caller is billed each run of its job (``domain.billing.call_usage``) by the
store, in the transaction that ends the run, not here: no crash can lose it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace

from attrs import define, field

from skiff.clock import Clock
from skiff.domain.billing import Usage, UsageKind, flavor_of
from skiff.domain.endpoints import ComputeType
from skiff.domain.pods import DesiredStatus
from skiff.domain.workers import WorkerKind, WorkerState
from skiff.ids import short_id
from skiff.services.wakeups import Wakeups
from skiff.store.base import Store

log = logging.getLogger(__name__)

#: How often a pass runs.
METER_SECONDS = 2.0
#: Worker states that hold nothing: no process, or none for long.
UNBILLED_STATES = (WorkerState.THROTTLED, WorkerState.UNHEALTHY)


#: Told that a metered thing is gone this very moment (``Meter.ended``).
UsageEnded = Callable[[UsageKind, str], Awaitable[None]]


async def not_metered(_kind: UsageKind, _thing_id: str) -> None:
    """For the services' tests that meter nothing."""


def subject(kind: UsageKind, thing_id: str) -> str:
    """What the store keys a usage by: one open usage per subject."""
    return f"{kind.value}:{thing_id}"


@define(eq=False, repr=False, slots=False)
class Meter:
    _store: Store
    _clock: Clock
    _wakeups: Wakeups
    _interval: float = METER_SECONDS
    #: When this leader's metering began (its first pass): nothing is billed from before.
    _resumed_at: float | None = field(init=False, default=None)
    #: Subjects seen not billable (a throttled worker): they count from when they become so.
    _waiting: set[str] = field(init=False, factory=set)
    _lock: asyncio.Lock = field(init=False, factory=asyncio.Lock)

    def __attrs_post_init__(self) -> None:
        #: An end is never put more than this after the usage was last seen: what ends long
        #: after its last pass (a killed server's worker, forgotten on the restart) ended then.
        self._gap = self._interval
        #: An open usage not seen for this long at a lead's start belongs to a meter that
        #: stopped (a killed server); a live one sees each usage once an interval.
        self._unseen = 2 * self._interval

    async def resume(self) -> None:
        """This replica starts metering (it took the lead): usages left open by a meter that
        stopped end where they were last seen."""
        async with self._lock:
            await self._resume()

    def pause(self) -> None:
        """This replica stops metering (it lost the lead); the next ``resume`` starts anew."""
        self._resumed_at = None

    async def _resume(self) -> float:
        now = self._clock.now()
        ended = await self._store.end_unseen_usages(now - self._unseen)
        if ended:
            log.info("metering resumed: %d usage(s) left open ended where last seen", ended)
        self._resumed_at = now
        return now

    async def run(self) -> None:
        await self._wakeups.repeat(self.pass_once, self._interval, "the meter's pass", log)

    async def ended(self, kind: UsageKind, thing_id: str) -> None:
        """The thing is gone now: its usage ends at this very moment."""
        async with self._lock:
            await self._store.end_usage(subject(kind, thing_id), self._clock.now(), self._gap)

    async def pass_once(self) -> None:
        async with self._lock:
            now = self._clock.now()
            resumed_at = self._resumed_at
            if resumed_at is None:
                resumed_at = await self._resume()
            wanted = await self._wanted(now)
            current = {s: u for s, u, _ in await self._store.open_usages()}
            for key, usage in current.items():
                want = wanted.get(key)
                if want is None or not _same(usage, want):
                    await self._store.end_usage(key, now, self._gap)
            for key, want in wanted.items():
                have = current.get(key)
                if have is not None and _same(have, want):
                    continue
                # A changed one continues from now; a new one from when it started, but never
                # from before this meter ran nor from before it became billable.
                start = now if have is not None else max(want.started_at, resumed_at)
                await self._store.open_usage(
                    replace(want, id=short_id(), started_at=min(start, now)), key, now
                )
            await self._store.touch_usages(now)

    async def _wanted(self, now: float) -> dict[str, Usage]:
        """What holds resources now, each as the usage it would open (by subject)."""
        wanted: dict[str, Usage] = {}
        endpoints = {e.id: e for e in await self._store.list_endpoints(None)}
        waiting: set[str] = set()
        for worker in await self._store.list_workers(None):
            endpoint = endpoints.get(worker.endpoint_id)
            if worker.kind is not WorkerKind.LOCAL or endpoint is None:
                continue
            key = subject(UsageKind.WORKER, worker.id)
            if worker.state in UNBILLED_STATES:
                waiting.add(key)
                continue
            started = now if key in self._waiting else worker.started_at
            gpus = len(worker.gpu_ids.split(",")) if worker.gpu_ids else 0
            cpu = endpoint.spec.computeType is ComputeType.CPU or not gpus
            wanted[key] = Usage(
                id="",
                user_id=endpoint.userId,
                kind=UsageKind.WORKER,
                started_at=started,
                endpoint_id=endpoint.id,
                instance_id=worker.id,
                gpu_type=None if cpu else worker.gpu,
                gpu_count=0 if cpu else gpus,
                cpu_flavor=flavor_of(endpoint.spec.cpuFlavorIds) if cpu else None,
                vcpus=endpoint.spec.vcpuCount if cpu else 0,
            )
        self._waiting = waiting
        for pod in await self._store.list_pods(None):
            spec = pod.spec
            # Restarting in place, it keeps its GPUs: still metered.
            if pod.placement.owner:
                gpus = len(pod.placement.gpuIds)
                wanted[subject(UsageKind.POD, pod.id)] = Usage(
                    id="",
                    user_id=pod.userId,
                    kind=UsageKind.POD,
                    started_at=pod.lastStartedAt or now,
                    pod_id=pod.id,
                    instance_id=pod.id,
                    gpu_type=pod.placement.gpuName if gpus else None,
                    gpu_count=gpus,
                    cpu_flavor=flavor_of(spec.cpuFlavorIds)
                    if spec.computeType is ComputeType.CPU
                    else None,
                    vcpus=spec.vcpuCount if spec.computeType is ComputeType.CPU else 0,
                )
            keeps_volume = spec.volumeInGb > 0 and spec.networkVolumeId is None
            if keeps_volume and pod.desiredStatus is not DesiredStatus.TERMINATED:
                wanted[subject(UsageKind.POD_VOLUME, pod.id)] = Usage(
                    id="",
                    user_id=pod.userId,
                    kind=UsageKind.POD_VOLUME,
                    started_at=pod.createdAt,
                    pod_id=pod.id,
                    disk_gb=spec.volumeInGb,
                )
        for owner, volume in await self._store.all_network_volumes():
            wanted[subject(UsageKind.NETWORK_VOLUME, volume.id)] = Usage(
                id="",
                user_id=owner,
                kind=UsageKind.NETWORK_VOLUME,
                started_at=volume.createdAt,
                volume_id=volume.id,
                disk_gb=volume.size,
            )
        return wanted


def _same(have: Usage, want: Usage) -> bool:
    """Whether an open usage still measures what is wanted (the same resources)."""
    return (have.gpu_type, have.gpu_count, have.vcpus, have.disk_gb, have.user_id) == (
        want.gpu_type,
        want.gpu_count,
        want.vcpus,
        want.disk_gb,
        want.user_id,
    )
