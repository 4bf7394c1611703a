"""Every time rule of the job interface, proven on the injected clock (no real waiting)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import orjson
import pytest

from service_stubs import RecordingFleet, any_webhook, connected, no_oldest, nothing_blocks
from skiff.clock import ManualClock
from skiff.domain.endpoints import Endpoint, EndpointSpec
from skiff.domain.jobs import JobStatus, parse_job_request
from skiff.domain.results import parse_worker_result
from skiff.domain.workers import Worker, WorkerKind, WorkerState
from skiff.errors import Invalid, NotFound
from skiff.services.dispatch import Dispatch
from skiff.services.job_events import JobEvents
from skiff.services.jobs import Jobs
from skiff.services.metrics import Metrics
from skiff.services.reaper import Reaper
from skiff.services.wakeups import Wakeups
from skiff.services.workers import Workers
from skiff.store.sqlite import SQLiteStore

STOP_GRACE = 10.0


@dataclass
class Rig:
    store: SQLiteStore
    clock: ManualClock
    jobs: Jobs
    dispatch: Dispatch
    reaper: Reaper
    fleet: RecordingFleet
    endpoint: Endpoint
    workers: Workers

    async def local_worker(self, worker_id: str = "w1") -> None:
        """A worker this server started (only those are ended by the reaper)."""
        await self.workers.add(
            Worker(
                id=worker_id,
                endpoint_id="ep1",
                kind=WorkerKind.LOCAL,
                state=WorkerState.INITIALIZING,
                version=1,
                started_at=self.clock.now(),
            )
        )

    async def submit(self, sync: bool = False, wait_ms: int | None = None, **body: Any) -> str:
        doc = {"input": {"x": 1}, **body}
        job = await self.jobs.submit(
            self.endpoint,
            parse_job_request(orjson.dumps(doc), self.endpoint.spec.executionTimeoutMs),
            sync=sync,
            wait_ms=wait_ms,
        )
        return job.id

    async def take(self, worker_id: str = "w1") -> list[str]:
        jobs = await self.dispatch.take(self.endpoint, worker_id, 1, 0.05, connected)
        return [j.id for j in jobs]

    async def status(self, job_id: str) -> JobStatus:
        return (await self.jobs.get(self.endpoint, job_id)).status

    async def later(self, seconds: float) -> None:
        self.clock.advance(seconds)
        await self.reaper.pass_once()


@pytest.fixture
async def rig(store: SQLiteStore, clock: ManualClock) -> AsyncIterator[Rig]:
    wakeups = Wakeups()
    events = JobEvents(wakeups)
    workers = Workers(store, clock)
    metrics = Metrics(store, clock, workers, no_oldest)
    dispatch = Dispatch(
        store, clock, wakeups, workers, events, metrics, lease_seconds=3600, max_attempts=3
    )
    jobs = Jobs(store, clock, wakeups, events, nothing_blocks, any_webhook)
    fleet = RecordingFleet()
    reaper = Reaper(
        store,
        clock,
        wakeups,
        events,
        workers,
        dispatch,
        fleet,  # type: ignore[arg-type]
        interval=1,
        worker_silence=10**6,
        stop_grace=STOP_GRACE,
    )
    endpoint = Endpoint(
        id="ep1",
        userId="u1",
        version=1,
        createdAt=clock.now(),
        spec=EndpointSpec(name="ep", templateId="t1", executionTimeoutMs=60_000),
    )
    await store.create_endpoint(endpoint)
    yield Rig(store, clock, jobs, dispatch, reaper, fleet, endpoint, workers)


# -- executionTimeout -------------------------------------------------------------------


async def test_execution_timeout_moves_a_running_job_to_timed_out(rig: Rig) -> None:
    job_id = await rig.submit(policy={"executionTimeout": 5000})
    await rig.take()
    await rig.later(4.9)
    assert await rig.status(job_id) is JobStatus.IN_PROGRESS
    await rig.later(0.1)
    assert await rig.status(job_id) is JobStatus.TIMED_OUT


async def test_execution_timeout_defaults_to_the_endpoints_setting(rig: Rig) -> None:
    job_id = await rig.submit()
    await rig.take()
    await rig.later(59.9)
    assert await rig.status(job_id) is JobStatus.IN_PROGRESS
    await rig.later(0.1)
    assert await rig.status(job_id) is JobStatus.TIMED_OUT


async def test_execution_timeout_counts_only_while_a_worker_executes(rig: Rig) -> None:
    job_id = await rig.submit(policy={"executionTimeout": 5000})
    await rig.later(600)  # ten minutes in the queue
    assert await rig.status(job_id) is JobStatus.IN_QUEUE
    await rig.take()
    await rig.later(4)
    assert await rig.status(job_id) is JobStatus.IN_PROGRESS


async def test_a_timed_out_job_is_stopped_through_job_stop(rig: Rig) -> None:
    job_id = await rig.submit(policy={"executionTimeout": 5000})
    await rig.take()
    await rig.later(5)
    assert await rig.dispatch.stop_signals(rig.endpoint, "w1", 0.05, connected) == [job_id]


async def test_a_result_after_the_timeout_is_acknowledged_and_ignored(rig: Rig) -> None:
    job_id = await rig.submit(policy={"executionTimeout": 5000})
    await rig.take()
    await rig.later(5)
    await rig.dispatch.done(
        rig.endpoint, "w1", job_id, parse_worker_result(b'{"output": "too late"}')
    )
    job = await rig.jobs.get(rig.endpoint, job_id)
    assert job.status is JobStatus.TIMED_OUT and job.output_json is None


async def test_a_worker_that_does_not_let_go_within_the_grace_is_ended(rig: Rig) -> None:
    await rig.local_worker()
    await rig.submit(policy={"executionTimeout": 5000})
    await rig.take()
    await rig.later(5)
    await rig.later(STOP_GRACE - 1)
    assert rig.fleet.stopped == []
    await rig.later(2)
    assert rig.fleet.stopped == ["w1"]


async def test_a_worker_that_lets_go_in_time_is_kept(rig: Rig) -> None:
    await rig.local_worker()
    await rig.submit(policy={"executionTimeout": 5000})
    await rig.take()
    await rig.later(5)
    # It asks for work again, holding nothing: it let go.
    await rig.dispatch.take(rig.endpoint, "w1", 1, 0.05, connected, jobs_in_progress=False)
    await rig.later(STOP_GRACE + 1)
    assert rig.fleet.stopped == []


# -- ttl --------------------------------------------------------------------------------


async def test_ttl_deletes_a_queued_job(rig: Rig) -> None:
    job_id = await rig.submit(policy={"ttl": 10_000})
    await rig.later(9.9)
    assert await rig.status(job_id) is JobStatus.IN_QUEUE
    await rig.later(0.1)
    with pytest.raises(NotFound):
        await rig.jobs.get(rig.endpoint, job_id)
    assert await rig.store.get_job("ep1", job_id) is None


async def test_ttl_counts_from_submission_over_queue_and_execution(rig: Rig) -> None:
    job_id = await rig.submit(policy={"ttl": 20_000, "executionTimeout": 600_000})
    await rig.later(15)
    await rig.take()
    await rig.later(5)
    assert await rig.store.get_job("ep1", job_id) is None


async def test_ttl_expiry_stops_and_deletes_a_running_job(rig: Rig) -> None:
    job_id = await rig.submit(policy={"ttl": 10_000})
    await rig.take()
    await rig.later(10)
    with pytest.raises(NotFound):
        await rig.jobs.get(rig.endpoint, job_id)
    assert await rig.dispatch.stop_signals(rig.endpoint, "w1", 0.05, connected) == [job_id]


async def test_an_expired_job_answers_404_to_stream_cancel_and_retry(rig: Rig) -> None:
    job_id = await rig.submit(policy={"ttl": 10_000})
    rig.clock.advance(10)  # before any reaper pass: reads still refuse it
    for call in (rig.jobs.read_stream, rig.jobs.cancel, rig.jobs.retry):
        with pytest.raises(NotFound):
            await call(rig.endpoint, job_id)


async def test_status_ttl_sets_the_ttl_of_that_job(rig: Rig) -> None:
    job_id = await rig.submit()
    await rig.jobs.set_ttl(rig.endpoint, job_id, 6000)
    await rig.later(5.9)
    assert await rig.status(job_id) is JobStatus.IN_QUEUE
    await rig.later(0.1)
    with pytest.raises(NotFound):
        await rig.jobs.get(rig.endpoint, job_id)


async def test_ttl_outside_its_range_is_refused(rig: Rig) -> None:
    for ttl in (9_999, 604_800_001):
        with pytest.raises(Invalid) as info:
            await rig.submit(policy={"ttl": ttl})
        assert info.value.field == "policy.ttl"


# -- retention --------------------------------------------------------------------------


async def _finish(rig: Rig, job_id: str) -> None:
    assert await rig.take() == [job_id]
    await rig.dispatch.done(rig.endpoint, "w1", job_id, parse_worker_result(b'{"output": 1}'))


async def test_a_finished_run_job_is_readable_for_30_minutes(rig: Rig) -> None:
    job_id = await rig.submit()
    await _finish(rig, job_id)
    await rig.later(30 * 60 - 1)
    assert await rig.status(job_id) is JobStatus.COMPLETED
    await rig.later(1)
    with pytest.raises(NotFound):
        await rig.jobs.get(rig.endpoint, job_id)


async def test_a_finished_runsync_job_is_readable_for_1_minute(rig: Rig) -> None:
    job_id = await rig.submit(sync=True)
    assert job_id.startswith("sync-")
    await _finish(rig, job_id)
    await rig.later(59)
    assert await rig.status(job_id) is JobStatus.COMPLETED
    await rig.later(1)
    with pytest.raises(NotFound):
        await rig.jobs.get(rig.endpoint, job_id)


@pytest.mark.parametrize(("wait_ms", "kept_s"), [(30_000, 60), (120_000, 120), (300_000, 300)])
async def test_a_runsync_job_with_wait_is_kept_as_long_as_the_wait_up_to_5_minutes(
    rig: Rig, wait_ms: int, kept_s: int
) -> None:
    job_id = await rig.submit(sync=True, wait_ms=wait_ms)
    await _finish(rig, job_id)
    await rig.later(kept_s - 1)
    assert await rig.status(job_id) is JobStatus.COMPLETED
    await rig.later(1)
    with pytest.raises(NotFound):
        await rig.jobs.get(rig.endpoint, job_id)


async def test_retry_works_inside_the_retention_window_only(rig: Rig) -> None:
    job_id = await rig.submit()
    await rig.take()
    await rig.dispatch.done(rig.endpoint, "w1", job_id, parse_worker_result(b'{"error": "boom"}'))
    assert (await rig.jobs.retry(rig.endpoint, job_id)).status is JobStatus.IN_QUEUE
    await rig.take("w2")
    await rig.dispatch.done(
        rig.endpoint, "w2", job_id, parse_worker_result(b'{"error": "boom again"}')
    )
    await rig.later(30 * 60)
    with pytest.raises(NotFound):
        await rig.jobs.retry(rig.endpoint, job_id)


async def test_retry_clears_the_previous_output_and_error(rig: Rig) -> None:
    job_id = await rig.submit(policy={"executionTimeout": 5000})
    await rig.take()
    await rig.dispatch.done(
        rig.endpoint, "w1", job_id, parse_worker_result(b'{"status": "IN_PROGRESS", "output": 1}')
    )
    await rig.later(5)
    assert await rig.status(job_id) is JobStatus.TIMED_OUT
    job = await rig.jobs.retry(rig.endpoint, job_id)
    assert (job.status, job.output_json, job.error, job.id) == (
        JobStatus.IN_QUEUE,
        None,
        None,
        job_id,
    )


@pytest.mark.parametrize("state", ["IN_QUEUE", "IN_PROGRESS", "COMPLETED", "CANCELLED"])
async def test_retry_from_any_other_state_is_refused_with_the_reason(rig: Rig, state: str) -> None:
    job_id = await rig.submit()
    if state != "IN_QUEUE":
        await rig.take()
    if state == "COMPLETED":
        await rig.dispatch.done(rig.endpoint, "w1", job_id, parse_worker_result(b'{"output": 1}'))
    if state == "CANCELLED":
        await rig.jobs.cancel(rig.endpoint, job_id)
    with pytest.raises(Invalid) as info:
        await rig.jobs.retry(rig.endpoint, job_id)
    assert state in info.value.message


# -- lowPriority ------------------------------------------------------------------------


async def test_low_priority_jobs_are_taken_after_normal_ones(rig: Rig) -> None:
    low = await rig.submit(policy={"lowPriority": True})
    normal = await rig.submit()
    assert await rig.take("w1") == [normal]
    assert await rig.take("w2") == [low]


async def test_low_priority_jobs_do_not_count_as_load(rig: Rig) -> None:
    await rig.submit(policy={"lowPriority": True})
    counts = await rig.store.job_counts("ep1")
    assert counts.in_queue == 1 and counts.in_queue_normal == 0
