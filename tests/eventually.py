"""The one way the tests wait for something to happen: poll what can be seen until it holds.

A fixed sleep either waits too long (slow tests) or too little (flaky ones on a loaded
machine); polling the observable condition does neither. The timeout is generous on purpose:
it only bounds how long a broken test hangs, it is never what a test asserts.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

TIMEOUT = 60.0
INTERVAL = 0.05


def _failure(what: str, timeout: float, last: object, context: Callable[[], str] | None) -> str:
    message = f"timed out after {timeout:g} s waiting for {what} (last seen: {last!r})"
    if context is not None:
        message += f"\n{context()}"
    return message


def eventually(
    check: Callable[[], T],
    what: str,
    *,
    timeout: float = TIMEOUT,
    interval: float = INTERVAL,
    ignoring: tuple[type[BaseException], ...] = (),
    context: Callable[[], str] | None = None,
) -> T:
    """The first truthy value of ``check()``, polled every ``interval`` seconds.

    Exceptions of the ``ignoring`` types count as "not yet" (a server still starting refuses
    connections); any other exception ends the wait at once. After ``timeout`` seconds it fails
    with an AssertionError naming ``what`` was awaited, the last value seen, and ``context()``
    (e.g. a server's log tail) when given.
    """
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            last = value = check()
        except ignoring as error:
            last = error
        else:
            if value:
                return value
        if time.monotonic() >= deadline:
            raise AssertionError(_failure(what, timeout, last, context))
        time.sleep(interval)


async def eventually_async(
    check: Callable[[], T | Awaitable[T]],
    what: str,
    *,
    timeout: float = TIMEOUT,
    interval: float = INTERVAL,
    ignoring: tuple[type[BaseException], ...] = (),
    context: Callable[[], str] | None = None,
) -> T:
    """:func:`eventually` for a running event loop: ``check`` may be sync or async, and the
    loop keeps running between polls (what is awaited usually happens on it)."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            value = check()
            if inspect.isawaitable(value):
                value = await value
            last = value
        except ignoring as error:
            last = error
        else:
            if value:
                return value  # type: ignore[return-value]
        if time.monotonic() >= deadline:
            raise AssertionError(_failure(what, timeout, last, context))
        await asyncio.sleep(interval)
