"""The meter (``services/metering.py``) on a real SQLite store, on a manual clock: what holds
resources is metered from its start to the moment it is gone, exactly at the hooks; a throttled
worker counts only once it runs; a killed server's open usages end where they were last seen;
two meters never count a second twice; a stopped pod bills its volume but no GPU time; a grown
volume bills its new size from then on."""

from __future__ import annotations

import datetime as dt

import pytest

from skiff.clock import ManualClock
from skiff.domain.billing import BucketSize, Grouping, Prices, UsageKind, records
from skiff.domain.endpoints import ComputeType, Endpoint, EndpointSpec
from skiff.domain.pods import DesiredStatus, Pod, PodPlacement, PodSpec
from skiff.domain.volumes import NetworkVolume
from skiff.domain.workers import Worker, WorkerKind, WorkerState
from skiff.services.metering import Meter
from skiff.services.wakeups import Wakeups
from skiff.services.workers import Workers
from skiff.store.sqlite import SQLiteStore

RTX = "NVIDIA GeForce RTX 4090"
PRICES = Prices(gpu_hour={RTX: 1.0}, volume_gb_month=7.3)
#: 2026-11-20 10:30 UTC: half past an hour.
T0 = dt.datetime(2026, 11, 20, 10, 30, tzinfo=dt.UTC).timestamp()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


async def gpu_endpoint(store: SQLiteStore, gpu_count: int = 1) -> None:
    spec = EndpointSpec(name="ep", templateId="t1", computeType=ComputeType.GPU, gpuCount=gpu_count)
    await store.create_endpoint(
        Endpoint(id="ep1", userId="alice", version=1, createdAt=T0, spec=spec)
    )


def gpu_worker(worker_id: str, state: WorkerState, at: float, gpu_ids: str = "0") -> Worker:
    return Worker(
        id=worker_id,
        endpoint_id="ep1",
        kind=WorkerKind.LOCAL,
        state=state,
        version=1,
        started_at=at,
        gpu=RTX if state is not WorkerState.THROTTLED else None,
        gpu_ids=gpu_ids if state is not WorkerState.THROTTLED else None,
    )


async def billed(store: SQLiteStore, size: BucketSize, grouping: Grouping, now: float) -> list:  # type: ignore[type-arg]
    usages = await store.usages_of("alice", T0 - 86400, T0 + 86400)
    return records(usages, T0 - 86400, T0 + 86400, size, grouping, PRICES, now)


async def test_a_worker_running_ninety_minutes_bills_two_hour_buckets_exactly(
    store: SQLiteStore, clock: ManualClock
) -> None:
    meter = Meter(store, clock, Wakeups(), interval=120)
    workers = Workers(store, clock, usage_ended=meter.ended)
    await gpu_endpoint(store, gpu_count=2)
    await workers.add(gpu_worker("w1", WorkerState.IDLE, T0, gpu_ids="0,1"))
    for _ in range(45):  # a pass every 2 minutes (each 2 s in a server)
        await meter.pass_once()
        clock.advance(120)
    await workers.remove("w1")  # at T0 + 90 min exactly: the hook ends it there
    await meter.pass_once()
    found = await billed(store, BucketSize.HOUR, Grouping.ENDPOINT_ID, clock.now() + 3600)
    assert [(r.timeBilledMs, r.amount) for r in found] == [
        (30 * 60 * 1000, pytest.approx(1.0)),  # two GPUs: twice the GPU-hour price
        (60 * 60 * 1000, pytest.approx(2.0)),
    ]


async def test_a_throttled_worker_counts_only_from_when_it_runs(
    store: SQLiteStore, clock: ManualClock
) -> None:
    meter = Meter(store, clock, Wakeups(), interval=60)
    workers = Workers(store, clock, usage_ended=meter.ended)
    await gpu_endpoint(store)
    worker = await workers.add(gpu_worker("w1", WorkerState.THROTTLED, T0))
    await meter.pass_once()
    clock.advance(600)
    await workers.update(worker, state=WorkerState.INITIALIZING, gpu=RTX, gpu_ids="0")
    await meter.pass_once()
    clock.advance(60)
    await workers.remove("w1")
    (record,) = await billed(store, BucketSize.DAY, Grouping.ENDPOINT_ID, clock.now())
    assert record.timeBilledMs == 60_000


async def test_a_killed_servers_open_usage_ends_where_it_was_last_seen(
    store: SQLiteStore, clock: ManualClock
) -> None:
    await gpu_endpoint(store)
    workers = Workers(store, clock)
    await workers.add(gpu_worker("w1", WorkerState.RUNNING, T0))
    first = Meter(store, clock, Wakeups())
    await first.pass_once()
    clock.advance(2)
    await first.pass_once()  # last seen at T0 + 2; then the server is killed
    clock.advance(300)
    # The next server's meter: the worker record is still there (its process survived, say).
    second = Meter(store, clock, Wakeups())
    await second.pass_once()
    clock.advance(10)
    await second.pass_once()
    usages = sorted(await store.usages_of("alice", T0, T0 + 1000), key=lambda u: u.started_at)
    assert [(u.started_at - T0, u.ended_at) for u in usages] == [
        (0, T0 + 2),  # ended where last seen: the 300 s no server metered are not billed
        (302, None),  # metered again from the new meter's first pass
    ]


async def test_a_worker_forgotten_long_after_its_last_sighting_ends_there(
    store: SQLiteStore, clock: ManualClock
) -> None:
    # A killed server's worker record, removed by the next server on its start (before its
    # meter's first pass): the time in between is not billed.
    meter = Meter(store, clock, Wakeups())
    workers = Workers(store, clock, usage_ended=meter.ended)
    await gpu_endpoint(store)
    await workers.add(gpu_worker("w1", WorkerState.RUNNING, T0))
    await meter.pass_once()
    clock.advance(600)
    await workers.remove("w1")
    (ended,) = await store.usages_of("alice", T0, T0 + 3600)
    assert ended.ended_at == T0 + 2  # a pass's time after it was last seen


async def test_two_meters_at_once_count_each_second_once(
    store: SQLiteStore, clock: ManualClock
) -> None:
    await gpu_endpoint(store)
    await Workers(store, clock).add(gpu_worker("w1", WorkerState.RUNNING, T0))
    meters = [Meter(store, clock, Wakeups()) for _ in range(2)]
    for _ in range(30):
        for meter in meters:
            await meter.pass_once()
        clock.advance(60)
    (record,) = await billed(store, BucketSize.DAY, Grouping.ENDPOINT_ID, clock.now())
    assert record.timeBilledMs == 30 * 60 * 1000
    assert len(await store.open_usages()) == 1


async def test_a_stopped_pod_bills_its_volume_and_no_gpu_time(
    store: SQLiteStore, clock: ManualClock
) -> None:
    # A pass each half hour here; a pass each 2 s in a server.
    meter = Meter(store, clock, Wakeups(), interval=1800)
    spec = PodSpec(name="p", imageName="x", gpuTypeIds=[RTX], volumeInGb=10)
    pod = Pod(
        id="p1",
        userId="alice",
        spec=spec,
        desiredStatus=DesiredStatus.RUNNING,
        createdAt=T0,
        lastStatusChange=T0,
    )
    await store.create_pod(pod)
    placed = PodPlacement(owner="r1", gpuName=RTX, gpuIds=[0])
    await store.set_pod_placement("p1", placed, T0)
    await meter.pass_once()
    clock.advance(1800)  # runs to 11:00
    await store.update_pod_settings(pod.model_copy(update={"desiredStatus": DesiredStatus.EXITED}))
    await store.set_pod_placement("p1", PodPlacement(), T0)
    await meter.ended(UsageKind.POD, "p1")
    clock.advance(3600)  # stopped from 11:00 to 12:00
    await meter.pass_once()
    found = await billed(store, BucketSize.HOUR, Grouping.POD_ID, clock.now())
    # 10:30-11:00 running (GPU time and storage), 11:00-12:00 stopped (storage alone).
    assert [(r.time - T0, r.timeBilledMs, r.diskSpaceBilledGb) for r in found] == [
        (-1800, 1_800_000, 10),
        (1800, 0, 10),
    ]
    assert found[1].amount == pytest.approx(7.3 * 10 / 730)


async def test_a_grown_volume_bills_its_new_size_from_then_on(
    store: SQLiteStore, clock: ManualClock
) -> None:
    meter = Meter(store, clock, Wakeups(), interval=1800)
    volume = NetworkVolume(id="v1", name="v", size=10, dataCenterId="local", createdAt=T0)
    await store.create_network_volume("alice", volume)
    await meter.pass_once()
    clock.advance(1800)
    await store.update_network_volume("alice", "v1", "v", 20)
    await meter.pass_once()
    clock.advance(1800)
    await meter.pass_once()
    usages = sorted(await store.usages_of("alice", T0, T0 + 7200), key=lambda u: u.started_at)
    assert [(u.disk_gb, u.started_at - T0, u.ended_at) for u in usages] == [
        (10, 0, T0 + 1800),
        (20, 1800, None),
    ]


async def test_a_cpu_worker_is_metered_by_its_flavor_and_vcpus(
    store: SQLiteStore, clock: ManualClock
) -> None:
    spec = EndpointSpec(
        name="ep", templateId="t1", computeType=ComputeType.CPU, vcpuCount=8, cpuFlavorIds=["cpu5g"]
    )
    await store.create_endpoint(
        Endpoint(id="ep1", userId="alice", version=1, createdAt=T0, spec=spec)
    )
    await Workers(store, clock).add(
        Worker("w1", "ep1", WorkerKind.LOCAL, WorkerState.IDLE, version=1, started_at=T0)
    )
    await Meter(store, clock, Wakeups()).pass_once()
    ((_, usage, _),) = await store.open_usages()
    assert (usage.cpu_flavor, usage.vcpus, usage.gpu_count, usage.gpu_type) == ("cpu5g", 8, 0, None)
