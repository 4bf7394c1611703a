"""Wakeups: listeners registered before a notify are woken, and nothing is left behind."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from skiff.services.wakeups import Signal, Wake, Wakeups, wait

A, B, K = Wake.endpoint("a"), Wake.endpoint("b"), Wake.SCALER


async def test_listener_registered_before_notify_is_woken() -> None:
    wakeups = Wakeups()
    with wakeups.listen(Wake.job("1")) as event:
        assert not event.is_set()
        wakeups.notify(Wake.job("1"))
        assert event.is_set()
        assert await wait(event, 0.05) is True


async def test_waiting_listener_is_woken_by_a_later_notify() -> None:
    wakeups = Wakeups()

    async def notify_soon() -> None:
        await asyncio.sleep(0.01)  # the point: the notify comes while the listener waits
        wakeups.notify(Wake.endpoint("a"))

    with wakeups.listen(Wake.endpoint("a")) as event:
        task = asyncio.create_task(notify_soon())
        started = time.monotonic()
        assert await wait(event, 2.0) is True
        assert time.monotonic() - started < 1.0
        await task


async def test_every_listener_of_a_key_is_woken_by_one_notify() -> None:
    wakeups = Wakeups()
    with wakeups.listen(Wake.job("1")) as first, wakeups.listen(Wake.job("1")) as second:
        assert wakeups.listening == 2
        wakeups.notify(Wake.job("1"))
        assert first.is_set()
        assert second.is_set()


async def test_notify_some_wakes_that_many_of_those_listening_longest() -> None:
    wakeups = Wakeups()
    with wakeups.listen(A) as first, wakeups.listen(A) as second, wakeups.listen(A) as third:
        wakeups.notify_some(A, 1)
        assert [first.is_set(), second.is_set(), third.is_set()] == [True, False, False]
        # One already woken is not counted again: the next wake-up is the next listener's.
        wakeups.notify_some(A, 1)
        assert [first.is_set(), second.is_set(), third.is_set()] == [True, True, False]
        wakeups.notify_some(A, 5)
        assert third.is_set()
    assert wakeups.listening == 0


async def test_a_claim_still_to_look_answers_for_notifications_up_to_its_room() -> None:
    wakeups = Wakeups()
    with wakeups.listen(A) as plain, wakeups.claiming(A, 2) as claim:
        wakeups.notify_some(A, 1)
        wakeups.notify_some(A, 1)
        # Its claim is not made yet and will see both: nobody else is woken.
        assert claim.owed == 2 and not plain.is_set()
        wakeups.notify_some(A, 1)  # no room left in it
        assert plain.is_set()


async def test_a_claim_whose_claim_is_made_answers_for_nothing_until_woken() -> None:
    wakeups = Wakeups()
    with wakeups.claiming(A, 5) as first, wakeups.claiming(A, 5) as second:
        first.looking = second.looking = False
        wakeups.notify_some(A, 1)
        assert first.is_set() and first.owed == 1 and not second.is_set()
        # Woken, it will look again: the next one is left to it as well.
        wakeups.notify_some(A, 1)
        assert first.owed == 2 and not second.is_set()


async def test_a_claim_with_no_room_is_not_woken_by_notify_some_but_by_notify() -> None:
    """A standby's take: its claims are refused, so a job left to it would wait for nobody."""
    wakeups = Wakeups()
    with wakeups.claiming(A, 0) as standby, wakeups.listen(A) as plain:
        wakeups.notify_some(A, 1)
        assert plain.is_set() and not standby.is_set() and standby.owed == 0
        wakeups.notify(A)  # its endpoint changed (it was promoted, say)
        assert standby.is_set()


async def test_notify_some_is_told_to_other_replicas_like_notify() -> None:
    published: list[str] = []
    wakeups = Wakeups(publish=published.append)
    wakeups.notify_some(A, 1)  # nobody listens here: the other replicas still hear it
    assert published == [A]


async def test_notify_wakes_only_its_own_key() -> None:
    wakeups = Wakeups()
    with wakeups.listen(Wake.job("1")) as one, wakeups.listen(Wake.job("2")) as two:
        wakeups.notify(Wake.job("2"))
        assert two.is_set()
        assert not one.is_set()
        assert await wait(one, 0.01) is False


async def test_notify_without_listener_is_harmless_and_not_remembered() -> None:
    wakeups = Wakeups()
    wakeups.notify(Wake.stop("w1"))
    assert wakeups.listening == 0
    with wakeups.listen(Wake.stop("w1")) as event:
        assert not event.is_set()


async def test_nothing_leaks_after_the_context_exits() -> None:
    wakeups = Wakeups()
    with wakeups.listen(A), wakeups.listen(A), wakeups.listen(B):
        assert wakeups.listening == 3
    assert wakeups.listening == 0


async def test_nothing_leaks_after_a_notified_context_exits() -> None:
    wakeups = Wakeups()
    with wakeups.listen(A), wakeups.listen(A):
        wakeups.notify(A)
    assert wakeups.listening == 0


async def test_nothing_leaks_when_the_body_raises() -> None:
    wakeups = Wakeups()
    try:
        with wakeups.listen(A):
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert wakeups.listening == 0


async def test_listener_after_a_notify_gets_a_fresh_event() -> None:
    wakeups = Wakeups()
    with wakeups.listen(K) as old:
        wakeups.notify(K)
        with wakeups.listen(K) as new:
            assert new is not old
            assert not new.is_set()
            assert wakeups.listening == 1
        assert wakeups.listening == 0
    assert wakeups.listening == 0


async def test_late_exit_of_an_old_listener_does_not_drop_a_new_one() -> None:
    wakeups = Wakeups()
    old_cm = wakeups.listen(K)
    old_cm.__enter__()
    wakeups.notify(K)
    with wakeups.listen(K) as new:
        old_cm.__exit__(None, None, None)
        assert wakeups.listening == 1
        wakeups.notify(K)
        assert new.is_set()
    assert wakeups.listening == 0


async def test_wait_returns_false_on_timeout_quickly() -> None:
    wakeups = Wakeups()
    with wakeups.listen(Wake.job("x")) as event:
        started = time.monotonic()
        assert await wait(event, 0.05) is False
        elapsed = time.monotonic() - started
    assert 0.04 <= elapsed < 0.5


async def test_wait_with_no_time_left_only_checks_the_event() -> None:
    event = Signal()
    assert await wait(event, 0) is False
    event.set()
    assert await wait(event, 0) is True
    assert await wait(event, -1.0) is True


async def test_a_wait_cancelled_leaves_nothing_waiting_and_a_later_notify_is_harmless() -> None:
    wakeups = Wakeups()
    with wakeups.listen(Wake.job("x")) as event:
        waiting = asyncio.create_task(wait(event, 60))
        await asyncio.sleep(0)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        wakeups.notify(Wake.job("x"))
        assert event.is_set()
        assert await wait(event, 60) is True  # set: no timer, no sleep


async def test_a_signal_waited_on_again_after_its_time_ran_out_is_woken_by_a_notify() -> None:
    wakeups = Wakeups()
    with wakeups.listen(Wake.job("x")) as event:
        assert await wait(event, 0.01) is False
        waiting = asyncio.create_task(wait(event, 60))
        await asyncio.sleep(0)
        wakeups.notify(Wake.job("x"))
        assert await asyncio.wait_for(waiting, 5) is True


async def test_a_second_waiter_on_one_listeners_signal_is_refused_not_left_asleep() -> None:
    wakeups = Wakeups()
    with wakeups.listen(Wake.job("x")) as event:
        first = asyncio.create_task(event.wait())
        await asyncio.sleep(0)
        with pytest.raises(RuntimeError):
            await event.wait(60)
        wakeups.notify(Wake.job("x"))
        assert await asyncio.wait_for(first, 5) is True


async def test_close_ends_every_wait_and_later_listens_do_not_block() -> None:
    wakeups = Wakeups()
    with wakeups.listen(K) as event:
        wakeups.close()
        assert await wait(event, 5) is True
    with wakeups.listen(K) as event:
        assert await wait(event, 5) is True


async def test_waiting_on_a_set_event_still_lets_other_tasks_run() -> None:
    ran = asyncio.Event()
    event = asyncio.Event()
    event.set()

    async def other() -> None:
        ran.set()

    task = asyncio.create_task(other())
    for _ in range(3):
        await wait(event, 1)
    assert ran.is_set()
    await task


def test_the_keys_keep_their_wire_form() -> None:
    # Replicas publish these strings to each other: one of another version must read them.
    assert Wake.job("j1") == "job:j1"
    assert Wake.endpoint("e1") == "ep:e1"
    assert Wake.stop("w1") == "stop:w1"
    assert Wake.SCALER == "scaler"


async def test_a_notify_is_published_and_a_delivered_key_is_not() -> None:
    published: list[str] = []
    wakeups = Wakeups(publish=published.append)
    with wakeups.listen(Wake.job("1")) as mine, wakeups.listen(Wake.job("2")) as theirs:
        wakeups.notify(Wake.job("1"))
        wakeups.deliver_all(["job:2"])
        assert mine.is_set() and theirs.is_set()
    assert published == ["job:1"]


async def test_max_wait_bounds_every_wait() -> None:
    wakeups = Wakeups(max_wait=0.05)
    with wakeups.listen(K) as event:
        started = time.monotonic()
        assert await wakeups.wait(event, 5.0) is False
        assert time.monotonic() - started < 1.0


async def test_repeat_logs_a_failed_pass_and_runs_the_next_until_closing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    wakeups = Wakeups()
    passes = 0

    async def step() -> None:
        nonlocal passes
        passes += 1
        if passes == 1:
            raise RuntimeError("boom")
        if passes == 3:
            wakeups.close()

    log = logging.getLogger("skiff.services.some_loop")
    with caplog.at_level(logging.ERROR, logger=log.name):
        await asyncio.wait_for(wakeups.repeat(step, 0.001, "the test pass", log), 2.0)
    assert passes == 3
    [record] = caplog.records
    assert record.name == log.name
    assert record.getMessage() == "the test pass failed; trying again"
