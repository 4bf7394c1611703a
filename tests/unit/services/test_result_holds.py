"""When a worker's job-done is answered: at once, or once its next job has reached it."""

from __future__ import annotations

import asyncio

from skiff.services.result_holds import ResultHolds

#: Long enough that an answer still pending after a short sleep is really being held.
LONG = 30.0


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def held_answer(holds: ResultHolds, worker: str = "w1") -> asyncio.Task[None]:
    task = asyncio.create_task(holds.hold(worker))
    await settle()
    return task


async def test_an_answer_is_not_held_when_the_worker_is_not_polling() -> None:
    holds = ResultHolds(LONG)
    await asyncio.wait_for(holds.hold("w1"), 1)


async def test_an_answer_is_not_held_when_the_waiting_take_has_room_for_one_job_only() -> None:
    # The SDK's default concurrency: holding its one slot would make it sleep instead of polling.
    holds = ResultHolds(LONG)
    with holds.polling("w1", 1):
        await asyncio.wait_for(holds.hold("w1"), 1)


async def test_an_answer_is_held_while_the_worker_polls_with_room_to_spare() -> None:
    holds = ResultHolds(LONG)
    with holds.polling("w1", 3):
        task = await held_answer(holds)
        assert not task.done()
        assert holds.held("w1") == 1
    task.cancel()


async def test_the_next_take_after_a_job_was_handed_over_releases_the_answer() -> None:
    holds = ResultHolds(LONG)
    with holds.polling("w1", 3):
        task = await held_answer(holds)
    holds.take_answered("w1", 3, delivered=1)
    await settle()
    assert not task.done(), "released before the worker showed it queued the job"
    holds.take_arrived("w1")
    await asyncio.wait_for(task, 1)
    assert holds.held("w1") == 0


async def test_a_take_answered_with_nothing_keeps_the_answer_held_for_the_next_job() -> None:
    holds = ResultHolds(LONG, watch=5.0)
    with holds.polling("w1", 3):
        task = await held_answer(holds)
    holds.take_answered("w1", 3, delivered=0)
    holds.take_arrived("w1")  # the worker polls again at once, as the SDK does after a 204
    with holds.polling("w1", 3):
        await settle()
        assert not task.done()
    holds.take_answered("w1", 3, delivered=2)
    holds.take_arrived("w1")
    await asyncio.wait_for(task, 1)


async def test_a_worker_that_does_not_poll_again_soon_is_released_by_the_watch() -> None:
    # Full, shutting down, or its concurrency changed: the SDK waits for its jobs to end.
    holds = ResultHolds(LONG, watch=0.01)
    with holds.polling("w1", 2):
        task = await held_answer(holds)
    holds.take_answered("w1", 3, delivered=0)
    await asyncio.wait_for(task, 1)


async def test_while_answers_are_held_a_take_gets_one_job_fewer_than_it_asked_for() -> None:
    holds = ResultHolds(LONG)
    assert holds.room("w1", 4) == 4
    with holds.polling("w1", 4):
        task = await held_answer(holds)
    # Room left after queueing the jobs: the worker polls again, which releases the answer.
    assert holds.room("w1", 4) == 3
    assert holds.room("w1", 1) == 1
    holds.release("w1")
    await asyncio.wait_for(task, 1)


async def test_release_answers_every_held_job_done_of_that_worker_only() -> None:
    holds = ResultHolds(LONG)
    with holds.polling("w1", 8), holds.polling("w2", 8):
        first = await held_answer(holds, "w1")
        second = await held_answer(holds, "w1")
        other = await held_answer(holds, "w2")
    holds.release("w1")
    await asyncio.wait_for(asyncio.gather(first, second), 1)
    assert not other.done()
    other.cancel()


async def test_no_answer_is_held_longer_than_the_limit() -> None:
    holds = ResultHolds(0.05)
    with holds.polling("w1", 2):
        task = await held_answer(holds)
    await asyncio.wait_for(task, 1)
    assert holds.held("w1") == 0


async def test_closing_answers_everything_and_holds_nothing_more() -> None:
    holds = ResultHolds(LONG)
    with holds.polling("w1", 2):
        task = await held_answer(holds)
        holds.close()
        await asyncio.wait_for(task, 1)
        await asyncio.wait_for(holds.hold("w1"), 1)


async def test_a_limit_of_zero_turns_holding_off() -> None:
    holds = ResultHolds(0)
    with holds.polling("w1", 8):
        await asyncio.wait_for(holds.hold("w1"), 1)


async def test_nothing_is_kept_for_a_worker_once_it_neither_polls_nor_waits() -> None:
    holds = ResultHolds(LONG)
    with holds.polling("w1", 2):
        task = await held_answer(holds)
    holds.release("w1")
    await task
    assert holds.tracked == 0


async def test_a_held_answer_whose_request_is_cancelled_no_longer_counts_and_others_stay_held() -> (
    None
):
    holds = ResultHolds(LONG)
    with holds.polling("w1", 3):
        left = await held_answer(holds)
        stays = await held_answer(holds)
        assert holds.held("w1") == 2
        left.cancel()
        await settle()
        assert holds.held("w1") == 1
        assert not stays.done()
    holds.release("w1")
    await asyncio.wait_for(stays, 1)
    assert holds.held("w1") == 0 and holds.tracked == 0


async def test_an_answer_between_a_take_with_jobs_and_the_next_take_waits_for_that_take() -> None:
    # The worker was handed jobs and has not polled again: it may not have queued them yet, and
    # answering now would end its last task first, so its loop would sleep on the SDK's tick.
    holds = ResultHolds(LONG)
    with holds.polling("w1", 3):
        pass
    holds.take_answered("w1", 3, delivered=1)
    task = await held_answer(holds)
    assert not task.done()
    holds.take_arrived("w1")
    await asyncio.wait_for(task, 1)
    # The next take has come: a later answer waits only while that take polls.
    await asyncio.wait_for(holds.hold("w1"), 1)


async def test_an_answer_after_a_take_with_jobs_is_released_by_the_watch_without_a_next_take() -> (
    None
):
    holds = ResultHolds(LONG, watch=0.01)
    holds.take_answered("w1", 3, delivered=2)
    task = await held_answer(holds)
    await asyncio.wait_for(task, 1)
    assert holds.tracked == 0


async def test_a_take_with_jobs_for_a_worker_with_room_for_one_holds_nothing_back() -> None:
    holds = ResultHolds(LONG)
    holds.take_answered("w1", 1, delivered=1)
    await asyncio.wait_for(holds.hold("w1"), 1)
    assert holds.tracked == 0


async def test_a_take_that_ends_without_an_answer_restarts_the_watch_on_held_answers() -> None:
    # dispatch.take calls take_answered(..., 0) when its take fails or is cancelled.
    holds = ResultHolds(LONG, watch=0.01)
    with holds.polling("w1", 3):
        task = await held_answer(holds)
    holds.take_answered("w1", 3, delivered=0)
    holds.take_arrived("w1")  # the next take stops the watch ...
    holds.take_answered("w1", 3, delivered=0)  # ... and, failing, starts it again
    await asyncio.wait_for(task, 1)


async def test_nothing_is_armed_once_holding_is_off() -> None:
    holds = ResultHolds(0)
    holds.take_answered("w1", 3, delivered=2)
    assert holds.tracked == 0


async def test_a_take_that_fills_the_worker_holds_nothing_back() -> None:
    # Full, the SDK sleeps a second before its next take: holding would only make the jobs just
    # handed over wait the whole watch for a running task to end.
    holds = ResultHolds(LONG, watch=LONG)
    holds.take_answered("w1", 3, delivered=3)
    await asyncio.wait_for(holds.hold("w1"), 1)
    assert holds.tracked == 0
