"""Rate limits on the job interface: per user, per endpoint, per operation.

Each limited operation has two budgets:

* requests per 10-second moving window (the ``limits`` library's moving window), raised by the
  dynamic rule ``max(base, running workers x per worker)`` so that an endpoint scaled out can be
  driven harder;
* concurrent requests, a counter held for the duration of the request.

Where the budgets live is chosen by a URL (the setting ``SKIFF_RATE_LIMIT_STORAGE``):

* ``memory://`` (the default): this process's memory, through the library's in-memory storage.
  A restart forgets it, and several server processes each keep their own budget.
* ``redis://host:port[/db]`` (or ``rediss://`` for TLS): one Redis shared by every replica, through
  the library's asyncio Redis storage (``async+redis://``, client :pypi:`coredis`), so that N
  replicas behind a load balancer hand out one budget, not N. The concurrency counter is a Redis
  key per identity, raised on entry and lowered on exit by Lua scripts, each atomic; its TTL is
  renewed on every entry so a replica that died holding slots cannot leave the key stuck forever.
  Should Redis fail (down, slow past :data:`REDIS_TIMEOUT_SECONDS`), requests are admitted
  unlimited for :data:`REDIS_RETRY_AFTER_SECONDS` before Redis is tried again, and a warning is
  logged: the limits protect the service, they must not take it down.

A refused request raises :class:`~skiff.errors.TooManyRequests` (HTTP 429 with ``Retry-After``).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import urllib.parse
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar

from limits import RateLimitItemPerSecond
from limits.aio.storage import RedisStorage
from limits.aio.storage.redis.coredis import CoredisBridge
from limits.aio.strategies import MovingWindowRateLimiter as AsyncMovingWindowRateLimiter
from limits.errors import ConfigurationError
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter

from skiff.clock import Clock, SystemClock
from skiff.errors import TooManyRequests

if TYPE_CHECKING:
    import coredis.commands

log = logging.getLogger(__name__)

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

#: Default storage: this process's memory.
MEMORY_STORAGE: Final = "memory://"

#: Prefix of every Redis key this module writes (window lists and concurrency counters).
DEFAULT_KEY_PREFIX: Final = "skiff:ratelimits"

#: A concurrency counter in Redis expires this long after the last request entered it. It must
#: outlast the longest request (a /runsync waits up to 300 s); it bounds how long slots held by a
#: replica that died stay counted once the identity goes quiet.
SLOT_TTL_SECONDS: Final = 600

#: Connect and reply timeout for Redis; past it the request is admitted unlimited.
REDIS_TIMEOUT_SECONDS: Final = 2.0

#: After Redis failed, requests are admitted unlimited without asking it for this long, so an
#: outage does not add a timeout to every request.
REDIS_RETRY_AFTER_SECONDS: Final = 5.0

# There is no telling when a concurrent request will finish; a second is a polite guess.
_CONCURRENCY_RETRY_AFTER: Final = 1

# At most one "Redis failed" warning per this many seconds, not one per request.
_WARNING_INTERVAL_SECONDS: Final = 30.0

_SETTING: Final = "SKIFF_RATE_LIMIT_STORAGE"

# Take a concurrency slot if fewer than ARGV[1] are held; renew the key's TTL (ARGV[2] s).
_LUA_TAKE_SLOT: Final = b"""
local held = tonumber(redis.call('GET', KEYS[1]) or '0')
if held >= tonumber(ARGV[1]) then
    return 0
end
redis.call('INCR', KEYS[1])
redis.call('EXPIRE', KEYS[1], ARGV[2])
return 1
"""

# Give a slot back; a counter at or below zero (it expired while held) is removed, never negative.
_LUA_FREE_SLOT: Final = b"""
local left = redis.call('DECR', KEYS[1])
if left <= 0 then
    redis.call('DEL', KEYS[1])
    return 0
end
return left
"""

Ident = tuple[str, str, str]

_T = TypeVar("_T")


class _Window(RateLimitItemPerSecond):
    """A request window whose storage key leaves out the amount.

    The library's key includes the limit, so a limit raised or lowered by the dynamic rule would
    start a fresh, empty window and hand out a new budget each time the worker count changes.
    One key per (user, endpoint, operation) keeps counting the same requests whatever the limit.
    """

    def key_for(self, *identifiers: bytes | str | int | float) -> str:
        # repr() keeps the parts apart even if an id contains the library's '/' separator.
        return f"{self.namespace}/{WINDOW_SECONDS}s/{identifiers!r}"


def _slot_key(ident: Ident) -> str:
    return f"CONCURRENCY/{ident!r}"


def _redacted(url: str) -> str:
    """``url`` without its password, fit for an error message."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return "<unparsable>"
    if parts.password is None:
        return url
    netloc = f"{parts.username or ''}:***@{parts.netloc.rpartition('@')[2]}"
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def _redis_url(url: str) -> str | None:
    """The library's ``async+`` URL for ``url``, None for memory; ValueError when invalid."""
    usage = f"{_SETTING} must be memory:// or redis://host:port[/db]"
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as err:
        raise ValueError(f"{usage}, not {_redacted(url)!r}: {err}") from None
    scheme = parts.scheme.lower()
    if scheme == "memory":
        if parts.netloc or parts.path or parts.query or parts.fragment:
            raise ValueError(f"{usage}: memory:// takes no host, path or options")
        return None
    if scheme not in ("redis", "rediss"):
        raise ValueError(f"{usage}, not {_redacted(url)!r}")
    if not parts.hostname:
        raise ValueError(f"{usage}: no host in {_redacted(url)!r}")
    if port == 0:
        raise ValueError(f"{usage}: port 0 in {_redacted(url)!r}")
    db = parts.path.lstrip("/")
    if db and not db.isdigit():
        raise ValueError(f"{usage}: the database must be a number, not {db!r}")
    if parts.fragment:
        raise ValueError(f"{usage}: unexpected #{parts.fragment} in {_redacted(url)!r}")
    return f"async+{scheme}{url[len(parts.scheme) :]}"


class _Budgets(Protocol):
    """Where the windows and the concurrency counters live."""

    #: What a failing storage raises; such a failure admits the request unlimited.
    errors: tuple[type[Exception], ...]

    async def test(self, window: _Window, ident: Ident) -> bool: ...

    async def hit(self, window: _Window, ident: Ident) -> bool: ...

    async def reset_time(self, window: _Window, ident: Ident) -> float: ...

    async def take_slot(self, ident: Ident, limit: int) -> bool: ...

    async def free_slot(self, ident: Ident) -> None: ...

    async def slots_held(self, ident: Ident) -> int: ...

    async def aclose(self) -> None: ...


class _MemoryBudgets:
    """This process's memory. No method suspends, so a test and the hit that follows it run
    without another request slipping in between on one event loop."""

    errors: tuple[type[Exception], ...] = ()

    def __init__(self) -> None:
        self._windows = MovingWindowRateLimiter(MemoryStorage())
        # ident -> concurrency slots held; a key is dropped at zero.
        self._slots: dict[Ident, int] = {}

    async def test(self, window: _Window, ident: Ident) -> bool:
        return self._windows.test(window, *ident)

    async def hit(self, window: _Window, ident: Ident) -> bool:
        return self._windows.hit(window, *ident)

    async def reset_time(self, window: _Window, ident: Ident) -> float:
        return self._windows.get_window_stats(window, *ident).reset_time

    async def take_slot(self, ident: Ident, limit: int) -> bool:
        held = self._slots.get(ident, 0)
        if held >= limit:
            return False
        self._slots[ident] = held + 1
        return True

    async def free_slot(self, ident: Ident) -> None:
        left = self._slots.get(ident, 0) - 1
        if left > 0:
            self._slots[ident] = left
        else:
            self._slots.pop(ident, None)

    async def slots_held(self, ident: Ident) -> int:
        return self._slots.get(ident, 0)

    async def aclose(self) -> None:
        return None


class _RedisBudgets:
    """A Redis shared by every replica.

    Every command runs as a task awaited through :func:`asyncio.shield`, so cancelling a request
    (a client gone, a cancel scope) never cancels a command on the wire: the client would drop
    the connection, failing the other requests' commands on it, and a slot taken or given back
    by a script whose answer was abandoned would be miscounted until the key's TTL. A slot taken
    by a cancelled request is given back once the script has answered.
    """

    def __init__(self, url: str, key_prefix: str) -> None:
        # Imported here: the client takes a while to import and only Redis storage needs it.
        import coredis.exceptions
        import coredis.retry

        # The client's errors, and the socket's (timeouts included).
        self.errors: tuple[type[Exception], ...] = (coredis.exceptions.RedisError, OSError)
        self._storage = RedisStorage(
            url,
            key_prefix=key_prefix,
            connect_timeout=REDIS_TIMEOUT_SECONDS,
            stream_timeout=REDIS_TIMEOUT_SECONDS,
        )
        bridge = self._storage.bridge
        assert isinstance(bridge, CoredisBridge)  # the library's default for async+redis
        self._bridge = bridge
        client = bridge.get_connection()
        # Retry a dropped connection (Redis restarted), not a timeout: the client's default
        # retries timeouts too, so a Redis that stopped answering would hold a request several
        # timeouts long before it is let through.
        client.retry_policy = coredis.retry.ConstantRetryPolicy(
            (coredis.exceptions.ConnectionError,), 2, 0.01
        )
        self._take: coredis.commands.Script[bytes] = client.register_script(_LUA_TAKE_SLOT)
        self._free: coredis.commands.Script[bytes] = client.register_script(_LUA_FREE_SLOT)
        self._windows = AsyncMovingWindowRateLimiter(self._storage)
        self._pending: set[asyncio.Task[Any]] = set()

    async def test(self, window: _Window, ident: Ident) -> bool:
        return await self._shielded(self._windows.test(window, *ident))

    async def hit(self, window: _Window, ident: Ident) -> bool:
        return await self._shielded(self._windows.hit(window, *ident))

    async def reset_time(self, window: _Window, ident: Ident) -> float:
        return (await self._shielded(self._windows.get_window_stats(window, *ident))).reset_time

    async def take_slot(self, ident: Ident, limit: int) -> bool:
        key = self._bridge.prefixed_key(_slot_key(ident))
        task = self._spawn(self._take.execute([key], [limit, SLOT_TTL_SECONDS]))
        try:
            return bool(await asyncio.shield(task))
        except asyncio.CancelledError:
            # The script may have run: give the slot back once it has answered.
            task.add_done_callback(lambda done: self._free_if_taken(done, ident))
            raise

    def _free_if_taken(self, done: asyncio.Task[Any], ident: Ident) -> None:
        if not done.cancelled() and done.exception() is None and done.result():
            self._spawn(self._free_slot(ident))

    async def free_slot(self, ident: Ident) -> None:
        await self._shielded(self._free_slot(ident))

    async def _free_slot(self, ident: Ident) -> None:
        key = self._bridge.prefixed_key(_slot_key(ident))
        try:
            await self._free.execute([key], [])
        except self.errors as err:
            # Nothing to do but say so: the key's TTL forgets the slot in the end.
            log.warning("rate limits: could not give back a concurrency slot in Redis: %r", err)

    async def slots_held(self, ident: Ident) -> int:
        return await self._shielded(self._storage.get(_slot_key(ident)))

    async def _shielded(self, coro: Coroutine[Any, Any, _T]) -> _T:
        return await asyncio.shield(self._spawn(coro))

    def _spawn(self, coro: Coroutine[Any, Any, _T]) -> asyncio.Task[_T]:
        task = asyncio.ensure_future(coro)
        self._pending.add(task)
        task.add_done_callback(self._forget)
        return task

    def _forget(self, task: asyncio.Task[Any]) -> None:
        self._pending.discard(task)
        # Mark the outcome as seen: a task whose awaiter was cancelled has no other reader.
        if not task.cancelled():
            task.exception()

    async def aclose(self) -> None:
        while self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)
        self._bridge.get_connection().connection_pool.disconnect()


class RateLimits:
    """Admits or refuses one request of an operation on an endpoint for a user.

    ``storage`` is ``memory://`` or ``redis://host:port[/db]`` (see the module's doc); any other
    value raises ValueError naming ``SKIFF_RATE_LIMIT_STORAGE``. ``key_prefix`` starts every
    Redis key, so that several deployments (or tests) can share one Redis.

    Time: ``clock`` is only read to turn the library's reset time into ``Retry-After``.

    * Memory storage reads ``time.time()`` itself, so a clock other than the system's agrees
      with it only if the storage's time is pointed at the same clock (as the tests do).
    * Redis storage is driven by real time, not by ``clock``: the library stamps each window
      entry with the replica's own ``time.time()`` and Redis expires the keys on its own clock.
      Replicas sharing a Redis must keep their clocks in step (NTP), and ``clock`` must be the
      system's for ``Retry-After`` to be right.

    With Redis, :meth:`aclose` closes the connections; call it on shutdown.
    """

    def __init__(
        self,
        enabled: bool,
        requests_per_worker: int,
        clock: Clock | None = None,
        *,
        storage: str = MEMORY_STORAGE,
        key_prefix: str = DEFAULT_KEY_PREFIX,
    ) -> None:
        self._enabled = enabled
        self._requests_per_worker = max(0, requests_per_worker)
        self._clock: Clock = clock if clock is not None else SystemClock()
        redis_url = _redis_url(storage)
        self._budgets: _Budgets
        if redis_url is None:
            self._budgets = _MemoryBudgets()
        else:
            try:
                self._budgets = _RedisBudgets(redis_url, key_prefix)
            except (ConfigurationError, ValueError) as err:
                raise ValueError(f"{_SETTING}={_redacted(storage)!r}: {err}") from err
        self._shared = redis_url is not None
        # (user, endpoint, operation) -> this process's requests in flight; a key is dropped at
        # zero so the map holds only identities with a request under way.
        self._in_flight: dict[Ident, int] = {}
        # After a storage failure: when to try it again, and when it was last logged.
        self._storage_back_at = -math.inf
        self._warned_at = -math.inf

    @property
    def enabled(self) -> bool:
        return self._enabled

    @property
    def shared(self) -> bool:
        """Whether the budgets live in Redis, shared with every replica using it."""
        return self._shared

    def request_limit(self, operation: str, running_workers: int) -> int | None:
        """Requests allowed per window for ``operation`` now, or None when it is not limited."""
        base = BASE_LIMITS.get(operation)
        if base is None:
            return None
        return max(base[0], running_workers * self._requests_per_worker)

    def in_flight(self, user_id: str, endpoint_id: str, operation: str) -> int:
        """Requests of this identity admitted by this process and not finished yet."""
        return self._in_flight.get((user_id, endpoint_id, operation), 0)

    async def shared_in_flight(self, user_id: str, endpoint_id: str, operation: str) -> int:
        """Concurrency slots this identity holds in the storage: on every replica sharing a
        Redis, on this process with memory. Only operations with a concurrency limit take one."""
        return await self._budgets.slots_held((user_id, endpoint_id, operation))

    async def aclose(self) -> None:
        """Wait for slots still being given back, then close the Redis connections (if any)."""
        await self._budgets.aclose()

    @asynccontextmanager
    async def admit(
        self,
        user_id: str,
        endpoint_id: str,
        operation: str,
        running_workers: int,
        named: str | None = None,
    ) -> AsyncIterator[None]:
        """Take one request's place for the ``async with`` body, or raise TooManyRequests.

        ``named`` is how a refusal names the operation to a person (the caller knows what it
        was called; ``operation`` itself by default).

        With memory storage nothing here suspends between the checks and the bookkeeping, so on
        one event loop no other request can slip in between the test and the hit. With Redis,
        each step is one atomic script and a request that loses a race is refused by the step
        that counts (the hit, or the slot), never admitted over the limit. If Redis fails, the
        request is admitted without limits (see the module's doc).
        """
        limit = self.request_limit(operation, running_workers) if self._enabled else None
        if limit is None:
            yield
            return
        ident = (user_id, endpoint_id, operation)
        slot = False
        if time.monotonic() >= self._storage_back_at:
            try:
                window = _Window(limit, WINDOW_SECONDS)
                slot = await self._enter(ident, window, named or operation)
            except self._budgets.errors as err:
                self._storage_failed(err)
        self._in_flight[ident] = self._in_flight.get(ident, 0) + 1
        try:
            yield
        finally:
            # Re-read: other requests of the same identity came and went during the body.
            left = self._in_flight[ident] - 1
            if left:
                self._in_flight[ident] = left
            else:
                del self._in_flight[ident]
            if slot:
                await self._budgets.free_slot(ident)

    async def _enter(self, ident: Ident, window: _Window, named: str) -> bool:
        """Check and spend; True when a concurrency slot was taken (to give back on exit)."""
        operation = ident[2]
        concurrent = BASE_LIMITS[operation][1]
        # Test the window first without spending from it: a request refused for concurrency
        # below should not use up the budget of the requests that follow it.
        if not await self._budgets.test(window, ident):
            raise await self._window_refusal(window, ident, named)
        slot = concurrent is not None
        if concurrent is not None and not await self._budgets.take_slot(ident, concurrent):
            raise TooManyRequests(
                f"limit of {concurrent} concurrent requests for {named} on this "
                f"endpoint reached; wait for one to finish, retry after "
                f"{_CONCURRENCY_RETRY_AFTER} s",
                _CONCURRENCY_RETRY_AFTER,
            )
        try:
            # Only now spend from the window. hit() re-checks atomically: on memory it cannot
            # disagree with test(); on Redis another replica may have spent the last place.
            if not await self._budgets.hit(window, ident):
                raise await self._window_refusal(window, ident, named)
        except BaseException:
            if slot:
                await self._budgets.free_slot(ident)
            raise
        return slot

    async def _window_refusal(self, window: _Window, ident: Ident, named: str) -> TooManyRequests:
        reset_time = await self._budgets.reset_time(window, ident)
        # The oldest request in the window leaves it at reset_time, freeing a place; round up
        # so a client waiting exactly that long is not refused again, and never say 0.
        retry_after = max(1, math.ceil(reset_time - self._clock.now()))
        return TooManyRequests(
            f"rate limit of {window.amount} requests per {WINDOW_SECONDS} s for "
            f"{named} on this endpoint exceeded; retry after {retry_after} s",
            retry_after,
        )

    def _storage_failed(self, err: Exception) -> None:
        now = time.monotonic()
        self._storage_back_at = now + REDIS_RETRY_AFTER_SECONDS
        if now - self._warned_at >= _WARNING_INTERVAL_SECONDS:
            self._warned_at = now
            log.warning(
                "rate limits not enforced: their storage failed (%r); trying it again in %s s",
                err,
                REDIS_RETRY_AFTER_SECONDS,
            )
