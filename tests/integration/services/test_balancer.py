"""The balancer on a real SQLite store: which worker takes a request, what waits, and how the
workers' states follow the requests in flight."""

from __future__ import annotations

import asyncio

import pytest

from eventually import eventually_async
from service_stubs import lb_endpoint as stub_lb_endpoint
from skiff.clock import ManualClock
from skiff.domain.endpoints import Endpoint
from skiff.domain.workers import Worker, WorkerKind, WorkerState
from skiff.errors import NoWorkerReady
from skiff.services.balancer import Balancer
from skiff.services.wakeups import Wake, Wakeups
from skiff.services.workers import Workers
from skiff.store.sqlite import SQLiteStore

T0 = 1_000.0


def lb_endpoint(workers_max: int = 3) -> Endpoint:
    return stub_lb_endpoint(T0, workersMax=workers_max)


async def add(workers: Workers, worker_id: str, state: WorkerState, port: int) -> Worker:
    return await workers.add(
        Worker(
            id=worker_id,
            endpoint_id="ep1",
            kind=WorkerKind.LOCAL,
            state=state,
            version=1,
            started_at=T0,
            idle_since=T0 if state is WorkerState.IDLE else None,
            address=f"127.0.0.1:{port}",
            health_address=f"127.0.0.1:{port}",
        )
    )


@pytest.fixture
def parts(store: SQLiteStore, clock: ManualClock) -> tuple[Workers, Wakeups, Balancer]:
    workers = Workers(store, clock)
    wakeups = Wakeups()
    return workers, wakeups, Balancer(workers, wakeups, wait_seconds=5, clock=clock)


async def test_requests_go_to_the_worker_with_fewest_in_flight(
    parts: tuple[Workers, Wakeups, Balancer],
) -> None:
    workers, _, balancer = parts
    await add(workers, "w1", WorkerState.IDLE, 9001)
    await add(workers, "w2", WorkerState.IDLE, 9002)
    await add(workers, "w3", WorkerState.INITIALIZING, 9003)

    leases = [await balancer.acquire(lb_endpoint()) for _ in range(4)]

    assert sorted(lease.worker_id for lease in leases) == ["w1", "w1", "w2", "w2"]
    assert balancer.demand("ep1").in_flight == 4
    assert {w.id: w.state for w in await workers.of_endpoint("ep1")} == {
        "w1": WorkerState.RUNNING,
        "w2": WorkerState.RUNNING,
        "w3": WorkerState.INITIALIZING,
    }
    for lease in leases:
        balancer.release(lease)
    await balancer.aclose()
    assert balancer.demand("ep1").in_flight == 0
    [w1, w2, _] = await workers.of_endpoint("ep1")
    assert w1.state is WorkerState.IDLE and w1.idle_since is not None
    assert w2.state is WorkerState.IDLE


async def test_a_worker_busy_again_before_its_idle_settles_is_never_written_idle(
    store: SQLiteStore, clock: ManualClock
) -> None:
    written: list[bool] = []

    class Counted(Workers):
        async def serving(
            self, worker_id: str, busy: bool, since: float | None = None
        ) -> Worker | None:
            written.append(busy)
            return await super().serving(worker_id, busy, since)

    workers = Counted(store, clock)
    balancer = Balancer(workers, Wakeups(), wait_seconds=5, clock=clock, idle_settle_seconds=3600)
    await add(workers, "w1", WorkerState.IDLE, 9001)

    for _ in range(3):  # a steady load: the count touches zero between requests
        balancer.release(await balancer.acquire(lb_endpoint()))
        clock.advance(2)
    lease = await balancer.acquire(lb_endpoint())
    await asyncio.sleep(0)

    assert written == [True]  # made running once, never idle in between
    stored = await store.get_worker("w1")  # the store itself, not the service's copy
    assert stored is not None
    assert stored.state is WorkerState.RUNNING and stored.idle_since is None

    ended_at = clock.now()
    balancer.release(lease)
    clock.advance(7)
    await balancer.aclose()  # a stopping server writes what was still settling
    assert written == [True, False]
    stored = await store.get_worker("w1")
    assert stored is not None
    assert stored.state is WorkerState.IDLE and stored.idle_since == ended_at


async def test_an_idle_worker_is_written_idle_once_settled_from_when_it_became_idle(
    store: SQLiteStore, clock: ManualClock
) -> None:
    workers = Workers(store, clock)
    balancer = Balancer(workers, Wakeups(), wait_seconds=5, clock=clock, idle_settle_seconds=0.05)
    await add(workers, "w1", WorkerState.IDLE, 9001)
    lease = await balancer.acquire(lb_endpoint())
    clock.advance(3)
    ended_at = clock.now()

    balancer.release(lease)
    clock.advance(30)  # idleTimeout counts from the request's end, not from the write

    async def idle() -> bool:
        stored = await store.get_worker("w1")
        return stored is not None and stored.state is WorkerState.IDLE

    await eventually_async(idle, "the worker written idle")
    stored = await store.get_worker("w1")
    assert stored is not None and stored.idle_since == ended_at
    await balancer.aclose()


async def test_a_stopping_worker_is_never_made_idle_again(
    parts: tuple[Workers, Wakeups, Balancer],
) -> None:
    workers, _, balancer = parts
    worker = await add(workers, "w1", WorkerState.IDLE, 9001)
    lease = await balancer.acquire(lb_endpoint())
    await workers.set_state(worker, WorkerState.STOPPING)

    balancer.release(lease)
    await balancer.aclose()

    stored = await workers.get("w1")
    assert stored is not None and stored.state is WorkerState.STOPPING


async def test_a_request_waits_for_a_worker_to_become_ready(
    parts: tuple[Workers, Wakeups, Balancer],
) -> None:
    workers, wakeups, balancer = parts
    await add(workers, "w1", WorkerState.INITIALIZING, 9001)
    with wakeups.listen(Wake.SCALER) as scaler:
        waiting = asyncio.create_task(balancer.acquire(lb_endpoint()))
        await asyncio.wait_for(scaler.wait(), 5)
    # Waiting counts as load, so the scaler starts a worker for it.
    assert balancer.demand("ep1").waiting == 1

    await workers.ready("w1")
    balancer.changed("ep1")
    lease = await asyncio.wait_for(waiting, 5)

    assert lease.worker_id == "w1"
    assert balancer.demand("ep1").waiting == 0


async def test_no_worker_in_time_is_a_refusal_with_retry_after(
    store: SQLiteStore, clock: ManualClock
) -> None:
    balancer = Balancer(Workers(store, clock), Wakeups(), wait_seconds=0.2, clock=clock)

    with pytest.raises(NoWorkerReady) as refused:
        await balancer.acquire(lb_endpoint())

    assert refused.value.status_code == 503
    assert refused.value.retry_after == 5
    assert balancer.demand("ep1").waiting == 0


async def test_with_no_room_for_workers_the_refusal_is_at_once(
    parts: tuple[Workers, Wakeups, Balancer],
) -> None:
    _, _, balancer = parts
    with pytest.raises(NoWorkerReady, match="workersMax is 0"):
        await asyncio.wait_for(balancer.acquire(lb_endpoint(workers_max=0)), 1)


async def test_a_worker_whose_connection_failed_or_that_exited_gets_nothing_more(
    parts: tuple[Workers, Wakeups, Balancer],
) -> None:
    workers, _, balancer = parts
    await add(workers, "w1", WorkerState.IDLE, 9001)
    await add(workers, "w2", WorkerState.IDLE, 9002)
    suspects: list[str] = []
    balancer.on_suspect(suspects.append)

    first = await balancer.acquire(lb_endpoint())
    balancer.release(first, connection_failed=True)
    second = await balancer.acquire(lb_endpoint())
    await balancer.on_exit(second.worker_id, -9)

    assert suspects == [first.worker_id]
    assert second.worker_id != first.worker_id
    assert balancer.is_out(first.worker_id) and balancer.is_out(second.worker_id)
    [worker] = [w for w in await workers.of_endpoint("ep1") if w.id == first.worker_id]
    balancer.back_in_rotation(worker)
    assert not balancer.is_out(first.worker_id)
    balancer.release(second)
    await balancer.aclose()
