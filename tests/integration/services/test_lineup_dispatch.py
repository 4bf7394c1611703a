"""Line-ups through Dispatch (services/lineup.py) on a real SQLite store, with the clock
injected: which takes get jobs lined up behind theirs, how a lined-up job looks while it waits,
and what becomes of it when its turn comes, when its worker is lost, or when it is cancelled or
purged before it started."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import orjson
import pytest

from service_stubs import RecordingFleet, any_webhook, connected, no_oldest, nothing_blocks
from skiff.clock import ManualClock
from skiff.domain.endpoints import Endpoint, EndpointSpec
from skiff.domain.jobs import Job, JobStatus, parse_job_request, status_view
from skiff.domain.results import parse_worker_result
from skiff.domain.workers import Worker, WorkerKind, WorkerState, outside_key
from skiff.errors import NotFound
from skiff.services.dispatch import Dispatch
from skiff.services.job_events import JobEvents
from skiff.services.jobs import Jobs
from skiff.services.lineup import MIN_SAMPLES, Lineup
from skiff.services.metrics import Metrics
from skiff.services.reaper import Reaper
from skiff.services.wakeups import Wakeups
from skiff.services.workers import Workers
from skiff.store.sqlite import SQLiteStore

LEASE = 30.0
#: How long each job of the endpoint's history ran: 20 s of line-up holds far more than any
#: test queues, so only the rule under test bounds a line-up.
HISTORY_SECONDS = 0.1


@dataclass
class Rig:
    store: SQLiteStore
    clock: ManualClock
    workers: Workers
    dispatch: Dispatch
    jobs: Jobs
    reaper: Reaper
    endpoint: Endpoint

    async def submit(self, **body: Any) -> str:
        doc = {"input": {"x": 1}, **body}
        request = parse_job_request(orjson.dumps(doc), self.endpoint.spec.executionTimeoutMs)
        return (await self.jobs.submit(self.endpoint, request, sync=False)).id

    async def take(
        self,
        worker_id: str = "w1",
        may_line_up: bool = True,
        jobs_in_progress: bool | None = False,
        limit: int = 1,
    ) -> list[Job]:
        """A take as the SDK >= 1.12 makes it when it holds nothing (``job_in_progress=0``)."""
        return await self.dispatch.take(
            self.endpoint,
            worker_id,
            limit,
            0.01,
            connected,
            jobs_in_progress=jobs_in_progress,
            may_line_up=may_line_up,
        )

    async def take_ids(self, worker_id: str = "w1", **how: Any) -> list[str]:
        return [j.id for j in await self.take(worker_id, **how)]

    async def done(self, job_id: str, worker_id: str = "w1", output: str = '"ok"') -> None:
        body = b'{"output": ' + output.encode() + b"}"
        assert (
            await self.dispatch.done(self.endpoint, worker_id, job_id, parse_worker_result(body))
            is None
        )

    async def stop_signals(self, worker_id: str = "w1") -> list[str]:
        return await self.dispatch.stop_signals(self.endpoint, worker_id, 0.01, connected)

    async def job(self, job_id: str) -> Job:
        return await self.jobs.get(self.endpoint, job_id)

    async def status(self, job_id: str) -> JobStatus:
        return (await self.job(job_id)).status

    async def view(self, job_id: str) -> dict[str, Any]:
        """The ``/status`` body of the job."""
        return status_view(await self.job(job_id), self.clock.now())

    async def history(self, worker_id: str = "w1") -> None:
        """Enough finished jobs of the endpoint (each ran ``HISTORY_SECONDS``) that it lines
        up; the worker is idle afterwards."""
        for _ in range(MIN_SAMPLES):
            job_id = await self.submit()
            assert await self.take_ids(worker_id) == [job_id]
            self.clock.advance(HISTORY_SECONDS)
            await self.done(job_id, worker_id)
        assert self.dispatch.lineup.expected_seconds(self.endpoint.id) is not None

    async def sweep(self) -> None:
        """One pass of the reaper: execution timeouts, ttl, lapsed leases."""
        await self.reaper.pass_once()


@pytest.fixture
async def rig(store: SQLiteStore, clock: ManualClock) -> AsyncIterator[Rig]:
    wakeups = Wakeups()
    events = JobEvents(wakeups)
    workers = Workers(store, clock)
    metrics = Metrics(store, clock, workers, no_oldest)
    dispatch = Dispatch(
        store,
        clock,
        wakeups,
        workers,
        events,
        metrics,
        lease_seconds=LEASE,
        max_attempts=2,
        lineup=Lineup(20.0),
    )
    # Workers this server runs (only those get line-ups); ending one is each test's to say
    # (end_worker), by default refused as for a worker already stopping.
    dispatch.can_end = lambda _worker: True
    jobs = Jobs(store, clock, wakeups, events, nothing_blocks, any_webhook)
    reaper = Reaper(
        store,
        clock,
        wakeups,
        events,
        workers,
        dispatch,
        RecordingFleet(),  # type: ignore[arg-type]
        interval=1,
        worker_silence=10**6,
        stop_grace=10**6,
    )
    endpoint = Endpoint(
        id="ep1",
        userId="u1",
        version=1,
        createdAt=clock.now(),
        spec=EndpointSpec(name="ep", templateId="t1", executionTimeoutMs=600_000),
    )
    await store.create_endpoint(endpoint)
    yield Rig(store, clock, workers, dispatch, jobs, reaper, endpoint)


def wid(rig: Rig, name: str = "w1") -> str:
    """The id the worker calling in as ``name`` is recorded under: it has no record before its
    first call, so it is kept as an outside worker is (``outside_key``)."""
    return outside_key(rig.endpoint.id, name)


async def _worker(rig: Rig, name: str) -> Worker:
    worker = await rig.workers.get(wid(rig, name))
    assert worker is not None
    return worker


# -- which takes get a line-up ------------------------------------------------------------


async def test_a_take_holding_nothing_gets_its_job_and_the_ones_lined_up_behind(rig: Rig) -> None:
    await rig.history()
    ids = [await rig.submit() for _ in range(4)]
    taken = await rig.take()
    assert [j.id for j in taken] == ids
    first, *lined = taken
    assert first.status is JobStatus.IN_PROGRESS and first.started_at == rig.clock.now()
    for job in lined:
        assert job.status is JobStatus.IN_QUEUE
        assert job.worker_id == wid(rig) and job.started_at is None
        assert job.lease_until == rig.clock.now() + LEASE
        assert job.attempt == 0
    assert await rig.status(ids[0]) is JobStatus.IN_PROGRESS
    for job_id in ids[1:]:
        assert await rig.status(job_id) is JobStatus.IN_QUEUE


async def test_no_other_worker_takes_a_job_lined_up_on_one(rig: Rig) -> None:
    await rig.history()
    ids = [await rig.submit() for _ in range(3)]
    assert await rig.take_ids("w1") == ids
    assert await rig.take_ids("w2", may_line_up=False, limit=5) == []
    assert await rig.status(ids[1]) is JobStatus.IN_QUEUE


async def test_nothing_is_lined_up_before_the_endpoint_has_history(rig: Rig) -> None:
    ids = [await rig.submit() for _ in range(MIN_SAMPLES + 2)]
    for job_id in ids[:MIN_SAMPLES]:
        assert await rig.take_ids() == [job_id]
        rig.clock.advance(HISTORY_SECONDS)
        await rig.done(job_id)
    assert await rig.take_ids() == ids[MIN_SAMPLES:]


@pytest.mark.parametrize(
    ("may_line_up", "jobs_in_progress"), [(False, False), (True, None), (True, True)]
)
async def test_a_take_that_may_not_line_up_gets_one_job(
    rig: Rig, may_line_up: bool, jobs_in_progress: bool | None
) -> None:
    """An SDK before 1.12 or not the SDK at all, or one that does not say it holds nothing:
    one job, as the protocol says."""
    await rig.history()
    ids = [await rig.submit() for _ in range(3)]
    taken = await rig.take(may_line_up=may_line_up, jobs_in_progress=jobs_in_progress)
    assert [j.id for j in taken] == ids[:1]
    # The others are anyone's.
    assert await rig.take_ids("w2", may_line_up=False, limit=5) == ids[1:]


async def test_a_take_of_several_gets_what_it_asked_for_and_no_line_up(rig: Rig) -> None:
    await rig.history()
    ids = [await rig.submit() for _ in range(5)]
    assert await rig.take_ids(limit=2) == ids[:2]
    for job_id in ids[:2]:
        assert await rig.status(job_id) is JobStatus.IN_PROGRESS
    assert await rig.take_ids("w2", may_line_up=False, limit=5) == ids[2:]


async def test_no_line_up_when_another_worker_of_the_endpoint_waits_idle(rig: Rig) -> None:
    await rig.history()
    # w2 asks for work and finds none: it is idle, waiting.
    assert await rig.take_ids("w2") == []
    assert (await _worker(rig, "w2")).state is WorkerState.IDLE
    ids = [await rig.submit() for _ in range(2)]
    assert await rig.take_ids("w1") == ids[:1]
    assert await rig.take_ids("w2") == ids[1:]


async def test_no_line_up_of_the_job_a_starting_worker_will_take(rig: Rig) -> None:
    await rig.history()
    await rig.workers.add(
        Worker(
            id="w2",
            endpoint_id="ep1",
            kind=WorkerKind.LOCAL,
            state=WorkerState.INITIALIZING,
            version=1,
            started_at=rig.clock.now(),
        )
    )
    ids = [await rig.submit() for _ in range(2)]
    assert await rig.take_ids("w1") == ids[:1]
    assert await rig.status(ids[1]) is JobStatus.IN_QUEUE


async def test_an_idle_worker_leaves_the_rest_of_the_queue_to_line_up(rig: Rig) -> None:
    await rig.history()
    assert await rig.take_ids("w2") == []
    ids = [await rig.submit() for _ in range(4)]
    # Three queued behind w1's job, one of them for idle w2.
    assert await rig.take_ids("w1") == ids[:3]
    assert await rig.take_ids("w2") == ids[3:]


# -- a lined-up job while it waits --------------------------------------------------------


async def test_a_lined_up_job_says_in_queue_without_a_worker(rig: Rig) -> None:
    await rig.history()
    submitted_at = rig.clock.now()
    ids = [await rig.submit() for _ in range(2)]
    rig.clock.advance(1.0)
    assert await rig.take_ids() == ids
    rig.clock.advance(2.0)
    running, lined = await rig.view(ids[0]), await rig.view(ids[1])
    assert running["status"] == "IN_PROGRESS" and running["workerId"] == "w1"
    assert lined["status"] == "IN_QUEUE"
    assert "workerId" not in lined
    assert lined["delayTime"] == round((rig.clock.now() - submitted_at) * 1000)
    assert "executionTime" not in lined


async def test_a_ping_for_the_running_job_keeps_its_line_up(rig: Rig) -> None:
    await rig.history()
    ids = [await rig.submit() for _ in range(2)]
    assert await rig.take_ids() == ids
    rig.clock.advance(LEASE - 1)
    await rig.dispatch.ping(rig.endpoint, "w1", ids[:1])
    rig.clock.advance(LEASE - 1)
    await rig.sweep()
    lined = await rig.job(ids[1])
    assert lined.status is JobStatus.IN_QUEUE and lined.worker_id == wid(rig)
    assert await rig.take_ids("w2", may_line_up=False) == []


# -- its turn -----------------------------------------------------------------------------


async def test_a_lined_up_job_starts_when_the_job_before_it_finishes(rig: Rig) -> None:
    await rig.history()
    ids = [await rig.submit() for _ in range(3)]
    assert await rig.take_ids() == ids
    rig.clock.advance(0.5)
    await rig.done(ids[0])
    started = await rig.job(ids[1])
    assert started.status is JobStatus.IN_PROGRESS
    assert started.started_at == rig.clock.now()
    assert started.attempt == 1
    assert (await rig.view(ids[1]))["workerId"] == "w1"
    assert await rig.status(ids[2]) is JobStatus.IN_QUEUE
    assert (await _worker(rig, "w1")).state is WorkerState.RUNNING
    rig.clock.advance(0.5)
    await rig.done(ids[1])
    rig.clock.advance(0.5)
    await rig.done(ids[2])
    for job_id in ids:
        assert await rig.status(job_id) is JobStatus.COMPLETED
    assert (await _worker(rig, "w1")).state is WorkerState.IDLE


async def test_execution_timeout_of_a_lined_up_job_counts_from_its_real_start(rig: Rig) -> None:
    await rig.history()
    first = await rig.submit()
    lined = await rig.submit(policy={"executionTimeout": 5000})
    assert await rig.take_ids() == [first, lined]
    # Past its 5 s measured from the take, while it still waits in line.
    rig.clock.advance(6.0)
    await rig.sweep()
    assert await rig.status(lined) is JobStatus.IN_QUEUE
    await rig.done(first)
    start = rig.clock.now()
    assert (await rig.job(lined)).run_deadline == pytest.approx(start + 5.0)
    rig.clock.advance(4.9)
    await rig.sweep()
    assert await rig.status(lined) is JobStatus.IN_PROGRESS
    rig.clock.advance(0.1)
    await rig.sweep()
    timed_out = await rig.job(lined)
    assert timed_out.status is JobStatus.TIMED_OUT
    assert timed_out.error is not None and "5000 ms" in timed_out.error
    assert await rig.stop_signals() == [lined]


async def test_a_finished_lined_up_job_reports_its_time_in_line_as_delay(rig: Rig) -> None:
    await rig.history()
    ids = [await rig.submit() for _ in range(2)]
    rig.clock.advance(1.0)
    assert await rig.take_ids() == ids
    rig.clock.advance(2.0)
    await rig.done(ids[0])
    rig.clock.advance(0.5)
    await rig.done(ids[1])
    first, lined = await rig.view(ids[0]), await rig.view(ids[1])
    assert (first["delayTime"], first["executionTime"]) == (1000, 2000)
    # Submitted, then 1 s queued and 2 s in line behind the first; ran 0.5 s.
    assert (lined["delayTime"], lined["executionTime"]) == (3000, 500)
    assert lined["status"] == "COMPLETED" and lined["workerId"] == "w1"


async def test_the_estimate_learns_a_lined_up_jobs_time_from_its_real_start(rig: Rig) -> None:
    await rig.history()
    ids = [await rig.submit() for _ in range(2)]
    assert await rig.take_ids() == ids
    rig.clock.advance(2.0)
    await rig.done(ids[0])
    rig.clock.advance(0.5)
    await rig.done(ids[1])
    # 0.1, 0.1, 0.1, then 2.0 and 0.5 (not the 2.5 s since the take), weighted 0.3.
    after_first = HISTORY_SECONDS + 0.3 * (2.0 - HISTORY_SECONDS)
    expected = after_first + 0.3 * (0.5 - after_first)
    assert rig.dispatch.lineup.expected_seconds("ep1") == pytest.approx(expected)


async def test_a_result_for_a_lined_up_job_starts_and_finishes_it(rig: Rig) -> None:
    """The worker ran its job and started the next without skiff hearing of the first
    result (it comes late): the next result is taken, and the line moves on."""
    await rig.history()
    ids = [await rig.submit() for _ in range(3)]
    assert await rig.take_ids() == ids
    rig.clock.advance(1.0)
    await rig.done(ids[1], output='"second"')
    second = await rig.job(ids[1])
    assert second.status is JobStatus.COMPLETED and second.output_json == '"second"'
    assert second.worker_id == wid(rig) and second.attempt == 1
    assert await rig.status(ids[2]) is JobStatus.IN_PROGRESS
    await rig.done(ids[0], output='"first"')
    assert (await rig.job(ids[0])).output_json == '"first"'


# -- a lost worker ------------------------------------------------------------------------


async def test_a_lost_workers_line_up_goes_back_to_the_queue_with_no_attempt(rig: Rig) -> None:
    await rig.history()
    ids = [await rig.submit() for _ in range(3)]
    assert await rig.take_ids("w1") == ids
    released = await rig.dispatch.worker_lost(await _worker(rig, "w1"), "gone")
    assert sorted(j.id for j in released) == sorted(ids)
    for job_id in ids[1:]:
        job = await rig.job(job_id)
        assert job.status is JobStatus.IN_QUEUE
        assert job.worker_id is None and job.lease_until is None
        assert job.attempt == 0 and job.retries == 0
    # The running one went back as a retry.
    assert (await rig.job(ids[0])).retries == 1
    assert await rig.take_ids("w2") == ids
    for job_id in ids[1:]:
        assert (await rig.job(job_id)).worker_id == wid(rig, "w2")


async def test_a_lapsed_lease_hands_the_line_up_back_with_no_attempt(rig: Rig) -> None:
    await rig.history()
    ids = [await rig.submit() for _ in range(3)]
    assert await rig.take_ids("w1") == ids
    rig.clock.advance(LEASE + 1)
    await rig.sweep()
    for job_id in ids[1:]:
        job = await rig.job(job_id)
        assert job.status is JobStatus.IN_QUEUE and job.worker_id is None
        assert job.attempt == 0 and job.retries == 0
    assert (await _worker(rig, "w1")).state is WorkerState.IDLE
    assert await rig.take_ids("w2", may_line_up=False, limit=3) == ids
    for job_id in ids[1:]:
        job = await rig.job(job_id)
        assert job.status is JobStatus.IN_PROGRESS and job.attempt == 1


async def test_a_lined_up_job_outlives_more_lost_workers_than_its_attempts(rig: Rig) -> None:
    """Two attempts allowed: the running job fails on the second lost worker; the one lined
    up behind it on both never started, so it waits on."""
    await rig.history()
    running, lined = await rig.submit(), await rig.submit()
    # Each taker is the endpoint's only worker (the one before it was lost): no idle one
    # waits for the second job.
    for worker_id in ("w1", "w2"):
        assert await rig.take_ids(worker_id) == [running, lined]
        await rig.dispatch.worker_lost(await _worker(rig, worker_id), "gone")
    assert await rig.status(running) is JobStatus.FAILED
    assert await rig.status(lined) is JobStatus.IN_QUEUE
    assert await rig.take_ids("w3") == [lined]
    assert (await rig.job(lined)).attempt == 1


# -- cancelled or purged before its turn --------------------------------------------------


async def test_a_cancelled_lined_up_job_is_passed_over_when_its_turn_comes(rig: Rig) -> None:
    await rig.history()
    ids = [await rig.submit() for _ in range(3)]
    assert await rig.take_ids() == ids
    cancelled = await rig.jobs.cancel(rig.endpoint, ids[1])
    assert cancelled.status is JobStatus.CANCELLED
    assert (await rig.view(ids[1]))["status"] == "CANCELLED"
    # Not the worker's business yet: it has not reached it.
    assert await rig.stop_signals() == []
    rig.clock.advance(0.5)
    await rig.done(ids[0])
    assert await rig.stop_signals() == [ids[1]]
    started = await rig.job(ids[2])
    assert started.status is JobStatus.IN_PROGRESS
    assert started.started_at == rig.clock.now()
    assert await rig.status(ids[1]) is JobStatus.CANCELLED
    # Its late result (the worker ran it anyway) changes nothing.
    await rig.done(ids[1])
    assert await rig.status(ids[1]) is JobStatus.CANCELLED
    await rig.done(ids[2])
    assert await rig.status(ids[2]) is JobStatus.COMPLETED


async def test_purged_lined_up_jobs_are_gone_and_passed_over(rig: Rig) -> None:
    await rig.history()
    ids = [await rig.submit() for _ in range(3)]
    assert await rig.take_ids() == ids
    assert await rig.jobs.purge_queue(rig.endpoint) == 2
    for job_id in ids[1:]:
        with pytest.raises(NotFound):
            await rig.job(job_id)
    assert await rig.status(ids[0]) is JobStatus.IN_PROGRESS
    assert await rig.stop_signals() == []
    await rig.done(ids[0])
    # A worker this cannot end is told of them one by one, moving past each as it is told.
    assert await rig.stop_signals() == [ids[1]]
    assert await rig.stop_signals() == [ids[2]]
    assert await rig.status(ids[0]) is JobStatus.COMPLETED
    # The queue is empty again for everyone.
    later = await rig.submit()
    assert await rig.take_ids("w2", may_line_up=False) == [later]


async def test_a_purge_passes_over_only_the_lined_up_jobs_it_removed(rig: Rig) -> None:
    """A job lined up after the purge (on another worker) is untouched by it."""
    await rig.history()
    ids = [await rig.submit() for _ in range(2)]
    assert await rig.take_ids("w1") == ids
    await rig.jobs.purge_queue(rig.endpoint)
    fresh = [await rig.submit() for _ in range(2)]
    assert await rig.take_ids("w2") == fresh
    await rig.done(ids[0])
    assert await rig.stop_signals("w1") == [ids[1]]
    await rig.done(fresh[0], "w2")
    assert await rig.stop_signals("w2") == []
    assert await rig.status(fresh[1]) is JobStatus.IN_PROGRESS


async def test_a_cancelled_running_job_starts_the_next_when_its_stop_is_taken(rig: Rig) -> None:
    await rig.history()
    ids = [await rig.submit() for _ in range(2)]
    assert await rig.take_ids() == ids
    await rig.jobs.cancel(rig.endpoint, ids[0])
    assert await rig.status(ids[1]) is JobStatus.IN_QUEUE
    rig.clock.advance(1.0)
    assert await rig.stop_signals() == [ids[0]]
    started = await rig.job(ids[1])
    assert started.status is JobStatus.IN_PROGRESS
    assert started.started_at == rig.clock.now()
    await rig.done(ids[1])
    assert await rig.status(ids[1]) is JobStatus.COMPLETED


async def test_the_result_before_a_job_cancelled_in_line_ends_the_worker_before_its_answer(
    rig: Rig,
) -> None:
    """The SDK starts the next job it queued as soon as this answer arrives: the worker is ended
    first, and the rest of its line is left for its exit to hand back."""
    await rig.history()
    ended: list[str] = []

    async def end(worker: Worker) -> bool:
        ended.append(worker.id)
        return True

    rig.dispatch.end_worker = end
    ids = [await rig.submit() for _ in range(3)]
    assert await rig.take_ids() == ids
    await rig.jobs.cancel(rig.endpoint, ids[1])
    assert ended == []
    await rig.done(ids[0])
    assert ended == [wid(rig)]
    assert await rig.status(ids[0]) is JobStatus.COMPLETED
    assert await rig.status(ids[2]) is JobStatus.IN_QUEUE
    await rig.dispatch.worker_lost(await _worker(rig, "w1"), "the worker was stopped")
    assert await rig.take_ids("w2", may_line_up=False) == [ids[2]]


async def test_a_stop_that_would_start_a_job_cancelled_in_line_ends_the_worker_instead(
    rig: Rig,
) -> None:
    await rig.history()
    ended: list[str] = []

    async def end(worker: Worker) -> bool:
        ended.append(worker.id)
        return True

    rig.dispatch.end_worker = end
    ids = [await rig.submit() for _ in range(3)]
    assert await rig.take_ids() == ids
    await rig.jobs.cancel(rig.endpoint, ids[1])
    await rig.jobs.cancel(rig.endpoint, ids[0])
    assert await rig.stop_signals() == []
    assert ended == [wid(rig)]
    assert await rig.status(ids[2]) is JobStatus.IN_QUEUE


async def test_a_result_with_a_wanted_job_next_ends_no_worker(rig: Rig) -> None:
    await rig.history()
    ended: list[str] = []

    async def end(worker: Worker) -> bool:
        ended.append(worker.id)
        return True

    rig.dispatch.end_worker = end
    ids = [await rig.submit() for _ in range(2)]
    assert await rig.take_ids() == ids
    await rig.done(ids[0])
    assert ended == []
    assert await rig.status(ids[1]) is JobStatus.IN_PROGRESS
