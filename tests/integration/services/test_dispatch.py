"""The worker side of the job interface on a real SQLite store, with the clock injected."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from eventually import eventually_async
from service_stubs import any_webhook, connected, no_oldest, nothing_blocks
from skiff.clock import ManualClock
from skiff.domain.endpoints import Endpoint, EndpointSpec
from skiff.domain.jobs import Job, JobRequest, JobStatus, parse_job_request
from skiff.domain.results import parse_worker_result, read_stream_chunk
from skiff.domain.workers import Worker, WorkerKind, WorkerState, outside_key
from skiff.services.dispatch import Dispatch, StillConnected
from skiff.services.job_events import JobEvents
from skiff.services.jobs import Jobs
from skiff.services.metrics import Metrics
from skiff.services.wakeups import Wakeups
from skiff.services.workers import Workers
from skiff.store.sqlite import SQLiteStore

LEASE = 30.0


def _request(endpoint: Endpoint, body: bytes) -> JobRequest:
    return parse_job_request(body, endpoint.spec.executionTimeoutMs)


@dataclass
class Rig:
    store: SQLiteStore
    clock: ManualClock
    workers: Workers
    dispatch: Dispatch
    jobs: Jobs
    endpoint: Endpoint
    wakeups: Wakeups

    async def submit(self, body: bytes = b'{"input": {"x": 1}}') -> str:
        return (await self.jobs.submit(self.endpoint, _request(self.endpoint, body), sync=False)).id

    async def status(self, job_id: str) -> JobStatus:
        return (await self.jobs.get(self.endpoint, job_id)).status


def wid(rig: Rig, name: str = "w1") -> str:
    """The id an outside worker calling in as ``name`` is recorded under."""
    return outside_key(rig.endpoint.id, name)


@pytest.fixture
async def rig(store: SQLiteStore, clock: ManualClock) -> AsyncIterator[Rig]:
    wakeups = Wakeups()
    events = JobEvents(wakeups)
    workers = Workers(store, clock)
    metrics = Metrics(store, clock, workers, no_oldest)
    dispatch = Dispatch(
        store, clock, wakeups, workers, events, metrics, lease_seconds=LEASE, max_attempts=2
    )
    jobs = Jobs(store, clock, wakeups, events, nothing_blocks, any_webhook)
    endpoint = Endpoint(
        id="ep1",
        userId="u1",
        version=1,
        createdAt=clock.now(),
        spec=EndpointSpec(name="ep", templateId="t1"),
    )
    await store.create_endpoint(endpoint)
    yield Rig(store, clock, workers, dispatch, jobs, endpoint, wakeups)


async def test_take_hands_a_queued_job_to_the_worker_and_marks_it_running(rig: Rig) -> None:
    job_id = await rig.submit()
    taken = await rig.dispatch.take(rig.endpoint, "w1", 1, 0.1, connected, jobs_in_progress=False)
    assert [j.id for j in taken] == [job_id]
    worker = await rig.workers.get(wid(rig))
    assert worker is not None and worker.state is WorkerState.RUNNING
    assert worker.kind is WorkerKind.EXTERNAL
    assert await rig.status(job_id) is JobStatus.IN_PROGRESS


async def test_take_with_nothing_queued_answers_empty_after_the_hold(rig: Rig) -> None:
    assert await rig.dispatch.take(rig.endpoint, "w1", 1, 0.05, connected) == []


async def test_a_worker_saying_it_holds_nothing_gets_its_lost_job_requeued(rig: Rig) -> None:
    job_id = await rig.submit()
    await rig.dispatch.take(rig.endpoint, "w1", 1, 0.1, connected, jobs_in_progress=False)
    # The reply carrying the job never reached the worker; it asks again holding nothing.
    again = await rig.dispatch.take(rig.endpoint, "w1", 1, 0.1, connected, jobs_in_progress=False)
    assert [j.id for j in again] == [job_id]
    assert (await rig.jobs.get(rig.endpoint, job_id)).retries == 1


async def test_a_stopped_job_keeps_its_worker_busy_until_it_lets_go(rig: Rig) -> None:
    job_id = await rig.submit()
    await rig.dispatch.take(rig.endpoint, "w1", 1, 0.1, connected, jobs_in_progress=False)
    cancelled = await rig.jobs.cancel(rig.endpoint, job_id)
    assert cancelled.status is JobStatus.CANCELLED
    assert await rig.dispatch.stop_signals(rig.endpoint, "w1", 0.1, connected) == [job_id]
    worker = await rig.workers.get(wid(rig))
    assert worker is not None and worker.state is WorkerState.RUNNING
    assert await rig.dispatch.stop_signals(rig.endpoint, "w1", 0.05, connected) == []
    await rig.dispatch.take(rig.endpoint, "w1", 1, 0.05, connected, jobs_in_progress=False)
    after = await rig.workers.get(wid(rig))
    assert after is not None and after.state is WorkerState.IDLE
    assert await rig.status(job_id) is JobStatus.CANCELLED


async def test_a_late_result_for_a_cancelled_job_is_ignored(rig: Rig) -> None:
    job_id = await rig.submit()
    await rig.dispatch.take(rig.endpoint, "w1", 1, 0.1, connected)
    await rig.jobs.cancel(rig.endpoint, job_id)
    await rig.dispatch.done(rig.endpoint, "w1", job_id, parse_worker_result(b'{"output": "late"}'))
    job = await rig.jobs.get(rig.endpoint, job_id)
    assert job.status is JobStatus.CANCELLED and job.output_json is None


async def _add_local_worker(rig: Rig, worker_id: str, state: WorkerState) -> None:
    await rig.workers.add(
        Worker(
            id=worker_id,
            endpoint_id="ep1",
            kind=WorkerKind.LOCAL,
            state=state,
            version=1,
            started_at=rig.clock.now(),
        )
    )


async def test_a_stopping_worker_takes_no_job(rig: Rig) -> None:
    await _add_local_worker(rig, "w1", WorkerState.STOPPING)
    job_id = await rig.submit()
    assert await rig.dispatch.take(rig.endpoint, "w1", 1, 0.05, connected) == []
    assert await rig.status(job_id) is JobStatus.IN_QUEUE


async def test_a_silent_external_worker_is_forgotten_and_its_job_requeued(rig: Rig) -> None:
    job_id = await rig.submit()
    await rig.dispatch.take(rig.endpoint, "w1", 1, 0.1, connected)
    rig.clock.advance(30)
    assert await rig.dispatch.forget_silent_workers(60) == []
    rig.clock.advance(31)
    forgotten = await rig.dispatch.forget_silent_workers(60)
    assert [w.id for w in forgotten] == [wid(rig)]
    assert await rig.workers.get(wid(rig)) is None
    assert await rig.status(job_id) is JobStatus.IN_QUEUE


async def test_pings_renew_leases_so_a_live_worker_keeps_its_job(rig: Rig) -> None:
    job_id = await rig.submit()
    await rig.dispatch.take(rig.endpoint, "w1", 1, 0.1, connected)
    rig.clock.advance(LEASE - 1)
    await rig.dispatch.ping(rig.endpoint, "w1", [job_id])
    rig.clock.advance(LEASE - 1)
    assert await rig.dispatch.release_expired_leases() == []
    assert await rig.status(job_id) is JobStatus.IN_PROGRESS


async def test_a_lapsed_lease_requeues_then_fails_after_the_last_attempt(rig: Rig) -> None:
    job_id = await rig.submit()
    for attempt in (1, 2):
        taken = await rig.dispatch.take(rig.endpoint, f"w{attempt}", 1, 0.1, connected)
        assert [j.id for j in taken] == [job_id]
        rig.clock.advance(LEASE + 1)
        await rig.dispatch.release_expired_leases()
    job = await rig.jobs.get(rig.endpoint, job_id)
    assert job.status is JobStatus.FAILED
    assert job.error is not None and "lease expired" in job.error


async def test_a_worker_whose_last_job_lapsed_is_idle_again(rig: Rig) -> None:
    job_id = await rig.submit()
    await rig.dispatch.take(rig.endpoint, "w1", 1, 0.1, connected, jobs_in_progress=False)
    rig.clock.advance(LEASE + 1)
    released = await rig.dispatch.release_expired_leases()
    assert [j.id for j in released] == [job_id]
    worker = await rig.workers.get(wid(rig))
    assert worker is not None and worker.state is WorkerState.IDLE


async def test_a_worker_told_to_stop_by_another_replica_ends_its_take_poll(rig: Rig) -> None:
    """The record says stopping (written by the leader elsewhere); the waiting take re-reads
    it when woken instead of trusting this replica's copy."""
    await rig.dispatch.take(rig.endpoint, "w1", 1, 0.01, connected, jobs_in_progress=False)

    async def stop_elsewhere() -> None:
        await rig.store.update_worker(wid(rig), {"state": WorkerState.STOPPING})
        rig.dispatch.wake_pollers("ep1")

    poll = asyncio.create_task(rig.dispatch.take(rig.endpoint, "w1", 1, 5.0, connected))
    await eventually_async(lambda: rig.wakeups.listening > 0, "the take to wait")
    await stop_elsewhere()
    await rig.submit()
    assert await asyncio.wait_for(poll, 2.0) == []


def _count_claims(rig: Rig) -> list[int]:
    """How many jobs each claim of the store brought, in order."""
    claims: list[int] = []
    claim = rig.store.claim_jobs

    async def counted(*args: object, **kwargs: object) -> list[Job]:
        taken = await claim(*args, **kwargs)  # type: ignore[arg-type]
        claims.append(len(taken))
        return taken

    rig.store.claim_jobs = counted  # type: ignore[method-assign]
    return claims


async def _two_takes_waiting(
    rig: Rig, limit: int, first_connected: StillConnected
) -> tuple[asyncio.Task[list[Job]], asyncio.Task[list[Job]]]:
    """Takes of ``w1`` then ``w2`` for up to ``limit`` jobs each, both waiting, ``w1``'s the
    longer (the first that a job wakes)."""
    first = asyncio.create_task(rig.dispatch.take(rig.endpoint, "w1", limit, 5.0, first_connected))
    await eventually_async(lambda: rig.wakeups.listening == 1, "the first take waiting")
    second = asyncio.create_task(rig.dispatch.take(rig.endpoint, "w2", limit, 5.0, connected))
    await eventually_async(lambda: rig.wakeups.listening == 2, "the second take waiting")
    return first, second


async def test_one_job_wakes_one_waiting_take_and_the_next_job_the_next(rig: Rig) -> None:
    claims = _count_claims(rig)
    polls = [
        asyncio.create_task(rig.dispatch.take(rig.endpoint, f"w{i}", 1, 5.0, connected))
        for i in range(3)
    ]
    await eventually_async(lambda: rig.wakeups.listening == 3, "three takes waiting")
    assert claims == [0, 0, 0]

    first = await rig.submit()
    done, waiting = await asyncio.wait(polls, timeout=2.0, return_when=asyncio.FIRST_COMPLETED)
    assert [[j.id for j in t.result()] for t in done] == [[first]]
    # Only the take that was woken claimed: no empty claim by the others.
    assert claims == [0, 0, 0, 1]
    assert rig.wakeups.listening == 2

    second = await rig.submit()
    done, waiting = await asyncio.wait(waiting, timeout=2.0, return_when=asyncio.FIRST_COMPLETED)
    assert [[j.id for j in t.result()] for t in done] == [[second]]
    assert claims == [0, 0, 0, 1, 1]
    for poll in waiting:
        poll.cancel()


async def test_a_take_woken_after_its_worker_left_passes_the_job_to_another(rig: Rig) -> None:
    gone = asyncio.Event()

    async def left() -> bool:
        return not gone.is_set()

    first, second = await _two_takes_waiting(rig, 1, left)

    gone.set()  # the first take's worker went away while it waited
    job_id = await rig.submit()

    assert await asyncio.wait_for(first, 2.0) == []
    assert [j.id for j in await asyncio.wait_for(second, 2.0)] == [job_id]


class Gate:
    """A take's ``still_connected`` that can be held shut: a take asking it is woken and yet
    to claim for as long as the test wants, and then answers ``connected``."""

    def __init__(self) -> None:
        self.shut = False
        self.held = asyncio.Event()
        self.opened = asyncio.Event()
        self.connected = True

    async def __call__(self) -> bool:
        if self.shut:
            self.held.set()
            await self.opened.wait()
        return self.connected


async def test_jobs_queued_while_a_woken_take_is_yet_to_claim_wake_no_other_take(
    rig: Rig,
) -> None:
    """The woken take's claim comes after them and sees them: waking another take for each
    would cost it an empty claim."""
    claims = _count_claims(rig)
    gate = Gate()
    first, second = await _two_takes_waiting(rig, 5, gate)

    gate.shut = True
    jobs = [await rig.submit()]
    await asyncio.wait_for(gate.held.wait(), 2.0)  # woken, not yet claimed
    jobs += [await rig.submit(), await rig.submit()]
    gate.opened.set()

    assert [j.id for j in await asyncio.wait_for(first, 2.0)] == jobs
    assert claims == [0, 0, 3]
    assert not second.done() and rig.wakeups.listening == 1
    second.cancel()


async def test_a_take_that_leaves_before_its_claim_passes_on_what_it_answered_for(
    rig: Rig,
) -> None:
    gate = Gate()
    first, second = await _two_takes_waiting(rig, 5, gate)

    gate.shut = True
    jobs = [await rig.submit()]
    await asyncio.wait_for(gate.held.wait(), 2.0)
    jobs += [await rig.submit(), await rig.submit()]
    gate.connected = False  # its worker went away before it claimed
    gate.opened.set()

    assert await asyncio.wait_for(first, 2.0) == []
    assert [j.id for j in await asyncio.wait_for(second, 2.0)] == jobs


async def test_a_take_with_no_more_room_leaves_the_next_job_to_another(rig: Rig) -> None:
    claims = _count_claims(rig)
    gate = Gate()
    first, second = await _two_takes_waiting(rig, 1, gate)

    gate.shut = True
    one = await rig.submit()
    await asyncio.wait_for(gate.held.wait(), 2.0)
    two = await rig.submit()  # the first take has room for one only: the second is woken
    # ... and claims at once, the oldest job first.
    assert [j.id for j in await asyncio.wait_for(second, 2.0)] == [one]
    gate.opened.set()
    assert [j.id for j in await asyncio.wait_for(first, 2.0)] == [two]
    assert claims == [0, 0, 1, 1]


async def test_a_standby_take_is_not_woken_for_a_job_and_another_take_is(rig: Rig) -> None:
    """A standby's claims are refused: a job left to it would wait for nobody."""
    await _add_local_worker(rig, "w1", WorkerState.STANDBY)
    standby, other = await _two_takes_waiting(rig, 5, connected)

    job_id = await rig.submit()

    assert [j.id for j in await asyncio.wait_for(other, 2.0)] == [job_id]
    assert not standby.done() and rig.wakeups.listening == 1
    standby.cancel()


async def test_standby_takes_do_not_hand_a_job_between_them(rig: Rig) -> None:
    await _add_local_worker(rig, "w1", WorkerState.STANDBY)
    await _add_local_worker(rig, "w2", WorkerState.STANDBY)
    claims = _count_claims(rig)
    takes = await _two_takes_waiting(rig, 5, connected)

    await rig.submit()

    assert rig.wakeups.listening == 2  # neither is woken
    assert claims == [0, 0]
    for take in takes:
        take.cancel()


async def _a_take_waiting_and_one_looking(
    rig: Rig,
) -> tuple[asyncio.Task[list[Job]], asyncio.Task[list[Job]], Gate]:
    """``w1``'s take waits; ``w2``'s has just arrived and is held before its claim."""
    waiting = asyncio.create_task(rig.dispatch.take(rig.endpoint, "w1", 1, 5.0, connected))
    await eventually_async(lambda: rig.wakeups.listening == 1, "the first take waiting")
    gate = Gate()
    gate.shut = True
    looking = asyncio.create_task(rig.dispatch.take(rig.endpoint, "w2", 1, 5.0, gate))
    await asyncio.wait_for(gate.held.wait(), 2.0)
    return waiting, looking, gate


async def test_a_take_whose_claim_fails_passes_on_the_job_it_answered_for(rig: Rig) -> None:
    waiting, looking, gate = await _a_take_waiting_and_one_looking(rig)
    job_id = await rig.submit()  # left to the take about to claim
    claim = rig.store.claim_jobs

    async def failing(endpoint_id: str, worker_id: str, *args: float) -> list[Job]:
        if worker_id == wid(rig, "w2"):
            raise RuntimeError("the database went away")
        return await claim(endpoint_id, worker_id, *args)  # type: ignore[arg-type]

    rig.store.claim_jobs = failing  # type: ignore[method-assign]
    gate.opened.set()
    with pytest.raises(RuntimeError):
        await looking
    assert [j.id for j in await asyncio.wait_for(waiting, 2.0)] == [job_id]


async def test_a_take_cancelled_before_its_claim_passes_on_the_job_it_answered_for(
    rig: Rig,
) -> None:
    waiting, looking, _gate = await _a_take_waiting_and_one_looking(rig)
    job_id = await rig.submit()
    looking.cancel()
    with pytest.raises(asyncio.CancelledError):
        await looking
    assert [j.id for j in await asyncio.wait_for(waiting, 2.0)] == [job_id]


async def test_a_worker_told_to_stop_has_its_job_stop_poll_ended_at_once(rig: Rig) -> None:
    """The SDK leaves on SIGTERM only once its job-stop long-poll is answered."""
    await rig.dispatch.take(rig.endpoint, "w1", 1, 0.01, connected, jobs_in_progress=False)
    poll = asyncio.create_task(rig.dispatch.stop_signals(rig.endpoint, "w1", 5.0, connected))
    await eventually_async(lambda: rig.wakeups.listening > 0, "the job-stop poll to wait")
    await rig.store.update_worker(wid(rig), {"state": WorkerState.STOPPING})
    rig.dispatch.worker_stopping(wid(rig))
    assert await asyncio.wait_for(poll, 2.0) == []


def _deep(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


@pytest.mark.parametrize("depth", [200, 300, 1023])
async def test_a_result_nested_too_deep_fails_the_job_with_that_reason(
    rig: Rig, depth: int
) -> None:
    job_id = await rig.submit()
    await rig.dispatch.take(rig.endpoint, "w1", 1, 0.1, connected, jobs_in_progress=False)
    refused = await rig.dispatch.done(
        rig.endpoint, "w1", job_id, parse_worker_result(b'{"output": ' + _deep(depth) + b"}")
    )
    assert refused is not None and "nested deeper than" in refused
    job = await rig.jobs.get(rig.endpoint, job_id)
    assert job.status is JobStatus.FAILED and job.error == refused
    assert job.output_json is None
    worker = await rig.workers.get(wid(rig))
    assert worker is not None and worker.state is WorkerState.IDLE


async def test_a_result_within_the_limit_is_not_refused(rig: Rig) -> None:
    job_id = await rig.submit()
    await rig.dispatch.take(rig.endpoint, "w1", 1, 0.1, connected, jobs_in_progress=False)
    assert (
        await rig.dispatch.done(
            rig.endpoint, "w1", job_id, parse_worker_result(b'{"output": [[1]]}')
        )
        is None
    )
    assert await rig.status(job_id) is JobStatus.COMPLETED


async def test_a_stream_chunk_nested_too_deep_fails_the_job_with_that_reason(rig: Rig) -> None:
    job_id = await rig.submit()
    await rig.dispatch.take(rig.endpoint, "w1", 1, 0.1, connected, jobs_in_progress=False)
    assert (
        await rig.dispatch.stream(rig.endpoint, "w1", job_id, read_stream_chunk(b'{"output": 1}'))
        is None
    )
    refused = await rig.dispatch.stream(
        rig.endpoint, "w1", job_id, read_stream_chunk(b'{"output": ' + _deep(400) + b"}")
    )
    assert refused is not None and "stream chunk" in refused
    job = await rig.jobs.get(rig.endpoint, job_id)
    assert job.status is JobStatus.FAILED and job.error == refused
    # The worker's own final answer afterwards changes nothing.
    assert (
        await rig.dispatch.done(rig.endpoint, "w1", job_id, parse_worker_result(b'{"output": 2}'))
        is None
    )
    assert (await rig.jobs.get(rig.endpoint, job_id)).status is JobStatus.FAILED
