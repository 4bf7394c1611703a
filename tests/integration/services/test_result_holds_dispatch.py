"""job-done answers held until the worker's next job reaches it, through the real dispatch and a
real SQLite store: the result itself is final at once, only the worker's answer waits."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from eventually import eventually_async
from service_stubs import any_webhook, connected, no_oldest, nothing_blocks
from skiff.clock import ManualClock
from skiff.domain.endpoints import Endpoint, EndpointSpec
from skiff.domain.jobs import JobStatus, parse_job_request
from skiff.domain.results import parse_worker_result
from skiff.domain.workers import WorkerState, outside_key
from skiff.services.dispatch import Dispatch
from skiff.services.job_events import JobEvents
from skiff.services.jobs import Jobs
from skiff.services.metrics import Metrics
from skiff.services.result_holds import ResultHolds
from skiff.services.wakeups import Wakeups
from skiff.services.workers import Workers
from skiff.store.sqlite import SQLiteStore

#: Longer than any test waits, so an answer that is not released stays pending.
HOLD = 30.0
POLL = 5.0
#: Longer than the pauses of these tests: only an explicit event releases an answer here.
WATCH = 2.0


@dataclass
class Rig:
    store: SQLiteStore
    wakeups: Wakeups
    workers: Workers
    dispatch: Dispatch
    jobs: Jobs
    endpoint: Endpoint

    async def submit(self) -> str:
        return (
            await self.jobs.submit(
                self.endpoint,
                parse_job_request(b'{"input": {}}', self.endpoint.spec.executionTimeoutMs),
                sync=False,
            )
        ).id

    def poll(self, room: int = 4) -> asyncio.Task[list[str]]:
        """A worker's take (``batch_size`` = room) waiting in the background."""

        async def take() -> list[str]:
            jobs = await self.dispatch.take(self.endpoint, "w1", room, POLL, connected, True)
            return [j.id for j in jobs]

        return asyncio.create_task(take())

    def report(self, job_id: str) -> asyncio.Task[None]:
        return asyncio.create_task(
            self.dispatch.done(
                self.endpoint, "w1", job_id, parse_worker_result(b'{"output": {"ok": true}}')
            )
        )


def wid(rig: Rig, name: str = "w1") -> str:
    """The id the outside worker calling in as ``name`` is recorded (and its answers held)
    under."""
    return outside_key(rig.endpoint.id, name)


@pytest.fixture
async def rig(store: SQLiteStore, clock: ManualClock) -> AsyncIterator[Rig]:
    wakeups = Wakeups()
    events = JobEvents(wakeups)
    workers = Workers(store, clock)
    metrics = Metrics(store, clock, workers, no_oldest)
    holds = ResultHolds(HOLD, watch=WATCH)
    dispatch = Dispatch(store, clock, wakeups, workers, events, metrics, 30.0, 2, holds)
    endpoint = Endpoint(
        id="ep1",
        userId="u1",
        version=1,
        createdAt=clock.now(),
        spec=EndpointSpec(name="ep", templateId="t"),
    )
    await store.create_endpoint(endpoint)
    jobs = Jobs(store, clock, wakeups, events, nothing_blocks, any_webhook)
    yield Rig(store, wakeups, workers, dispatch, jobs, endpoint)
    wakeups.close()


async def parked(rig: Rig) -> None:
    """Until a take started in the background waits for jobs."""
    await eventually_async(lambda: rig.wakeups.listening > 0, "the take to wait for jobs")


async def answer_is_held(rig: Rig) -> None:
    await eventually_async(
        lambda: rig.dispatch.result_holds.held(wid(rig)) > 0, "the worker's answer to be held"
    )


async def one_job_running(rig: Rig) -> str:
    first = await rig.submit()
    assert await rig.poll() == [first]
    return first


@dataclass
class Held:
    """A worker polling for more (``polling``) whose answer to ``job`` is being held."""

    job: str
    polling: asyncio.Task[list[str]]
    answer: asyncio.Task[None]


async def answer_held(rig: Rig, room: int = 4) -> Held:
    first = await one_job_running(rig)
    polling = rig.poll(room)
    await parked(rig)
    answer = rig.report(first)
    await answer_is_held(rig)
    assert not answer.done()
    return Held(first, polling, answer)


async def test_the_answer_waits_for_the_next_job_but_the_result_is_final_at_once(rig: Rig) -> None:
    held = await answer_held(rig)
    job = await rig.jobs.get(rig.endpoint, held.job)
    assert job.status is JobStatus.COMPLETED and job.output_json == '{"ok":true}'
    worker = await rig.workers.get(wid(rig))
    assert worker is not None and worker.state is WorkerState.IDLE

    second = await rig.submit()
    assert await asyncio.wait_for(held.polling, 2) == [second]
    # Deliberate: a while (well under WATCH) in which the answer must stay held.
    await asyncio.sleep(0.05)
    assert not held.answer.done(), "released before the worker polled again"
    again = rig.poll()
    await asyncio.wait_for(held.answer, 2)
    again.cancel()


async def test_a_take_while_an_answer_is_held_gets_one_job_fewer_than_asked(rig: Rig) -> None:
    held = await answer_held(rig, room=2)
    queued = [await rig.submit() for _ in range(3)]
    # The waiting take asked for two: it gets one, so the worker keeps room and polls again.
    first_batch = await asyncio.wait_for(held.polling, 2)
    assert len(first_batch) == 1
    # That poll releases the answer: with nothing held any more, it gets all it asked for.
    second_batch = await asyncio.wait_for(rig.poll(room=2), 2)
    await asyncio.wait_for(held.answer, 2)
    assert sorted(first_batch + second_batch) == sorted(queued)


async def test_a_worker_polling_for_one_job_gets_its_answer_at_once(rig: Rig) -> None:
    first = await one_job_running(rig)
    polling = rig.poll(room=1)
    await parked(rig)
    await asyncio.wait_for(rig.report(first), 2)
    polling.cancel()


async def test_stopping_the_worker_releases_its_held_answers(rig: Rig) -> None:
    held = await answer_held(rig)
    rig.dispatch.worker_stopping(wid(rig))
    await asyncio.wait_for(held.answer, 2)
    held.polling.cancel()


async def test_a_lost_worker_releases_its_held_answers(rig: Rig) -> None:
    held = await answer_held(rig)
    worker = await rig.workers.get(wid(rig))
    assert worker is not None
    await rig.dispatch.worker_lost(worker, "gone")
    await asyncio.wait_for(held.answer, 2)
    held.polling.cancel()


async def test_the_server_going_down_releases_every_held_answer(rig: Rig) -> None:
    held = await answer_held(rig)
    rig.wakeups.close()
    await asyncio.wait_for(held.answer, 2)
    assert await asyncio.wait_for(held.polling, 2) == []


async def test_a_progress_update_is_answered_at_once(rig: Rig) -> None:
    first = await one_job_running(rig)
    polling = rig.poll()
    await parked(rig)
    update = b'{"status": "IN_PROGRESS", "output": "half"}'
    await asyncio.wait_for(
        rig.dispatch.done(rig.endpoint, "w1", first, parse_worker_result(update)), 2
    )
    polling.cancel()


async def test_a_take_cancelled_while_an_answer_is_held_lets_the_watch_release_it(
    rig: Rig,
) -> None:
    # The take's arrival stopped the watch; ending without an answer must start it again, or
    # the answer would wait out HOLD.
    held = await answer_held(rig)
    rig.dispatch.result_holds.watch = 0.05
    held.polling.cancel()
    await asyncio.wait_for(held.answer, 2)


async def test_a_take_that_fills_the_worker_leaves_its_next_answer_unheld(rig: Rig) -> None:
    # Full, the SDK sleeps before its next take: nothing would come to release a held answer
    # before the watch, and its queued jobs would wait for that answer.
    queued = [await rig.submit() for _ in range(2)]
    assert sorted(await asyncio.wait_for(rig.poll(room=2), 2)) == sorted(queued)
    await asyncio.wait_for(rig.report(queued[0]), 1)


async def test_a_take_that_gets_its_cap_but_leaves_the_worker_room_holds_its_next_answer(
    rig: Rig,
) -> None:
    # The worker asked for 4 (its room) and one answer holds at most 2: it still has room and
    # polls again at once, so its next job-done waits for that take, as after any other.
    queued = [await rig.submit() for _ in range(3)]
    capped = await rig.dispatch.take(rig.endpoint, "w1", 2, POLL, connected, True, room=4)
    assert len(capped) == 2
    answer = rig.report(capped[0].id)
    await answer_is_held(rig)
    assert [j.id for j in await rig.dispatch.take(rig.endpoint, "w1", 2, POLL, connected)] == [
        j for j in queued if j not in {c.id for c in capped}
    ]
    await asyncio.wait_for(answer, 2)


async def test_a_take_naming_this_worker_through_another_endpoint_leaves_its_answers_alone(
    rig: Rig, clock: ManualClock
) -> None:
    """Another tenant's worker token can name ``w1`` through its own endpoint. That take is
    its own outside worker's, kept apart from ``w1`` (``outside_key``) before it counts as
    anyone's: it neither releases ``w1``'s held answer nor starts the watch that would."""
    held = await answer_held(rig)
    rig.dispatch.result_holds.watch = 0.05
    other = Endpoint(
        id="ep2",
        userId="u2",
        version=1,
        createdAt=clock.now(),
        spec=EndpointSpec(name="other", templateId="t"),
    )
    await rig.store.create_endpoint(other)
    assert await rig.dispatch.take(other, "w1", 4, 0.05, connected, True) == []
    theirs = await rig.store.get_worker(outside_key("ep2", "w1"))
    assert theirs is not None and theirs.endpoint_id == "ep2"
    # Deliberate: several times the watch, in which the answer must stay held.
    await asyncio.sleep(0.3)
    assert not held.answer.done(), "released by another endpoint's take"
    rig.dispatch.result_holds.release(wid(rig))
    await asyncio.wait_for(held.answer, 2)
    held.polling.cancel()
