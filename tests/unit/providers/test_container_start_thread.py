"""A container's start runs in a daemon thread of its own (``providers/docker.py``): its result
or error reaches the waiter, and a waiter that gave up neither waits for the thread nor sees
what it ends with."""

from __future__ import annotations

import asyncio
import threading

import pytest

from skiff.providers.docker import _in_daemon_thread


async def test_the_result_and_the_error_of_the_work_reach_the_waiter() -> None:
    assert await _in_daemon_thread(lambda: 42) == 42

    def fails() -> int:
        raise ValueError("no such image")

    with pytest.raises(ValueError, match="no such image"):
        await _in_daemon_thread(fails)


async def test_a_waiter_that_gave_up_does_not_wait_for_a_blocked_start() -> None:
    blocked, finished, running = threading.Event(), threading.Event(), threading.Event()
    seen: list[threading.Thread] = []

    def pull() -> str:
        seen.append(threading.current_thread())
        running.set()
        blocked.wait(10)
        finished.set()
        return "late"

    waiter = asyncio.create_task(_in_daemon_thread(pull))
    assert await asyncio.to_thread(running.wait, 10)
    # A thread the interpreter does not wait for at exit: a hung pull cannot hold up a
    # server's shutdown.
    assert seen[0].daemon
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    blocked.set()
    assert await asyncio.to_thread(finished.wait, 10)
    await asyncio.sleep(0.05)  # the late result is dropped, not set on the cancelled future
