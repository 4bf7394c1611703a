"""Rate limits on the job interface: per user, per endpoint, per operation.

Each limited operation has two budgets, both kept in this process's memory:

* requests per 10-second moving window (the ``limits`` library's moving window on its
  in-memory storage), raised by the dynamic rule ``max(base, running workers x per worker)``
  so that an endpoint scaled out can be driven harder;
* concurrent requests, a counter held for the duration of the request.

A refused request raises :class:`~skiff.errors.TooManyRequests` (HTTP 429 with ``Retry-After``).
State lives in one process: a restart forgets it, and several server processes would each
keep their own budget.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final

from limits import RateLimitItemPerSecond
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter

from skiff.clock import Clock, SystemClock
from skiff.errors import TooManyRequests

#: Length of the request window, in seconds.
WINDOW_SECONDS: Final = 10

#: Base limits: operation -> (requests per WINDOW_SECONDS, concurrent requests or None for no
#: concurrency limit). Operations not listed (health, retry, ...) are not limited.
BASE_LIMITS: Final[dict[str, tuple[int, int | None]]] = {
    "runsync": (2000, 400),
    "run": (1000, 200),
    "status": (2000, 400),
    "stream": (2000, 400),
    "cancel": (100, 20),
    "purge-queue": (2, None),
    "openai": (2000, 400),
    "requests": (10, 2),
}

# How an operation is named in messages, so a person can tell which route was refused.
_ROUTES: Final[dict[str, str]] = {"openai": "/openai/*"}

# There is no telling when a concurrent request will finish; a second is a polite guess.
_CONCURRENCY_RETRY_AFTER: Final = 1


def _route(operation: str) -> str:
    return _ROUTES.get(operation, f"/{operation}")


class _Window(RateLimitItemPerSecond):
    """A request window whose storage key leaves out the amount.

    The library's key includes the limit, so a limit raised or lowered by the dynamic rule would
    start a fresh, empty window and hand out a new budget each time the worker count changes.
    One key per (user, endpoint, operation) keeps counting the same requests whatever the limit.
    """

    def key_for(self, *identifiers: bytes | str | int | float) -> str:
        # repr() keeps the parts apart even if an id contains the library's '/' separator.
        return f"{self.namespace}/{WINDOW_SECONDS}s/{identifiers!r}"


class RateLimits:
    """Admits or refuses one request of an operation on an endpoint for a user.

    ``clock`` is only read to turn the library's reset time into ``Retry-After``; the library's
    memory storage reads ``time.time()`` itself, so a clock other than the system's agrees with
    it only if the storage's time is pointed at the same clock (as the tests do).
    """

    def __init__(self, enabled: bool, requests_per_worker: int, clock: Clock | None = None) -> None:
        self._enabled = enabled
        self._requests_per_worker = max(0, requests_per_worker)
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._windows = MovingWindowRateLimiter(MemoryStorage())
        # (user, endpoint, operation) -> requests in flight; a key is dropped at zero so the map
        # holds only identities with a request under way.
        self._in_flight: dict[tuple[str, str, str], int] = {}

    @property
    def enabled(self) -> bool:
        return self._enabled

    def request_limit(self, operation: str, running_workers: int) -> int | None:
        """Requests allowed per window for ``operation`` now, or None when it is not limited."""
        base = BASE_LIMITS.get(operation)
        if base is None:
            return None
        return max(base[0], running_workers * self._requests_per_worker)

    def in_flight(self, user_id: str, endpoint_id: str, operation: str) -> int:
        """Requests of this identity currently holding a concurrency slot."""
        return self._in_flight.get((user_id, endpoint_id, operation), 0)

    @asynccontextmanager
    async def admit(
        self, user_id: str, endpoint_id: str, operation: str, running_workers: int
    ) -> AsyncIterator[None]:
        """Hold one request's place for the ``async with`` body, or raise TooManyRequests.

        The checks and the bookkeeping run without an ``await`` between them, so on one event
        loop no other request can slip in between the test and the hit.
        """
        limit = self.request_limit(operation, running_workers) if self._enabled else None
        if limit is None:
            yield
            return
        concurrent = BASE_LIMITS[operation][1]
        ident = (user_id, endpoint_id, operation)
        window = _Window(limit, WINDOW_SECONDS)
        # Test the window first without spending from it: a request refused for concurrency
        # below should not use up the budget of the requests that follow it.
        if not self._windows.test(window, *ident):
            raise self._window_refusal(window, ident, operation)
        held = self._in_flight.get(ident, 0)
        if concurrent is not None and held >= concurrent:
            raise TooManyRequests(
                f"limit of {concurrent} concurrent requests for {_route(operation)} on this "
                f"endpoint reached; wait for one to finish, retry after "
                f"{_CONCURRENCY_RETRY_AFTER} s",
                _CONCURRENCY_RETRY_AFTER,
            )
        # Only now spend from the window. hit() re-checks atomically; it cannot disagree with
        # test() on one event loop, but a refusal here is still a refusal, not a free pass.
        if not self._windows.hit(window, *ident):
            raise self._window_refusal(window, ident, operation)
        self._in_flight[ident] = held + 1
        try:
            yield
        finally:
            # Re-read: other requests of the same identity came and went during the body.
            left = self._in_flight[ident] - 1
            if left:
                self._in_flight[ident] = left
            else:
                del self._in_flight[ident]

    def _window_refusal(
        self, window: _Window, ident: tuple[str, str, str], operation: str
    ) -> TooManyRequests:
        reset_time = self._windows.get_window_stats(window, *ident).reset_time
        # The oldest request in the window leaves it at reset_time, freeing a place; round up
        # so a client waiting exactly that long is not refused again, and never say 0.
        retry_after = max(1, math.ceil(reset_time - self._clock.now()))
        return TooManyRequests(
            f"rate limit of {window.amount} requests per {WINDOW_SECONDS} s for "
            f"{_route(operation)} on this endpoint exceeded; retry after {retry_after} s",
            retry_after,
        )
