"""The tests' one polling helper: what it returns, what it lets through, how it fails."""

from __future__ import annotations

import itertools

import pytest

from eventually import eventually, eventually_async


def test_eventually_returns_the_first_truthy_value_of_the_check() -> None:
    counter = itertools.count()
    assert eventually(lambda: next(counter) >= 3 and "ready", "three polls", interval=0) == "ready"


def test_eventually_treats_ignored_errors_as_not_yet() -> None:
    polls = itertools.count()

    def check() -> int:
        if (n := next(polls)) < 2:
            raise ConnectionError("not up yet")
        return n

    assert eventually(check, "the service", ignoring=(ConnectionError,), interval=0) == 2


def test_eventually_ends_at_once_on_an_error_it_was_not_told_to_ignore() -> None:
    def check() -> bool:
        raise RuntimeError("the process exited")

    with pytest.raises(RuntimeError, match="exited"):
        eventually(check, "the process", ignoring=(ConnectionError,))


def test_eventually_fails_naming_what_it_awaited_the_last_value_and_the_context() -> None:
    with pytest.raises(AssertionError) as failure:
        eventually(lambda: 0, "the queue to drain", timeout=0.05, context=lambda: "log tail")
    message = str(failure.value)
    assert "waiting for the queue to drain" in message
    assert "last seen: 0" in message
    assert message.endswith("\nlog tail")


async def test_eventually_async_awaits_an_async_check_and_returns_its_value() -> None:
    counter = itertools.count()

    async def check() -> int:
        return n if (n := next(counter)) >= 2 else 0

    assert await eventually_async(check, "two polls", interval=0) == 2


async def test_eventually_async_accepts_a_plain_check_and_fails_naming_it() -> None:
    assert await eventually_async(lambda: "yes", "a plain check") == "yes"
    with pytest.raises(AssertionError, match="waiting for nothing"):
        await eventually_async(lambda: None, "nothing", timeout=0.05)
