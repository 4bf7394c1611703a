"""Waiting without spinning: long-polls and ``/runsync`` sleep on a key until someone notifies it.

Keys (``Wake``): ``Wake.endpoint(id)`` (a job became available), ``Wake.job(id)`` (a job
changed: finished, streamed a chunk), ``Wake.stop(worker)`` (a job-stop signal is waiting),
``Wake.SCALER`` (the wanted number of workers may have changed). Inside one process a
``Signal`` per listener is enough; with several replicas every key notified here is also
published to the others (``publish``, PostgreSQL NOTIFY, as the key's string) and theirs arrive
through ``deliver``. A wake-up lost on the way is covered by ``max_wait``: no wait sleeps longer
before its caller checks the database again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator
from types import TracebackType
from typing import Final, Generic, NewType, TypeVar

#: What a wait sleeps on. Its string is the wire form replicas publish to each other, so the
#: forms below must not change while replicas of two versions may share a database.
WakeKey = NewType("WakeKey", str)
_S = TypeVar("_S", bound="Signal")


class Wake:
    """The wake-up keys, the only place their strings are spelled."""

    #: The wanted number of workers may have changed.
    SCALER: Final = WakeKey("scaler")
    #: A pod's wanted state changed, or one of its instances ended.
    PODS: Final = WakeKey("pods")

    @staticmethod
    def job(job_id: str) -> WakeKey:
        """The job changed: it finished, streamed a chunk or reported progress."""
        return WakeKey(f"job:{job_id}")

    @staticmethod
    def endpoint(endpoint_id: str) -> WakeKey:
        """A job of the endpoint became available, or the endpoint itself changed."""
        return WakeKey(f"ep:{endpoint_id}")

    @staticmethod
    def stop(worker_id: str) -> WakeKey:
        """A job-stop signal waits for the worker, or the worker is being stopped."""
        return WakeKey(f"stop:{worker_id}")


class Signal:
    """What one listener sleeps on: set once it is notified (or the server goes down), and
    never cleared, since each ``listen`` makes its own. An ``asyncio.Event`` for one waiter
    whose wait is bounded by a loop timer on a future, where ``asyncio.timeout`` would make
    a context (a task look-up, a rescheduled handle, its exit checks) on every wait: a
    ``/runsync`` job waits two or three times on its way (docs/performance.md)."""

    __slots__ = ("_flag", "_waiter")

    def __init__(self) -> None:
        self._flag = False
        self._waiter: asyncio.Future[bool] | None = None

    def is_set(self) -> bool:
        return self._flag

    def set(self) -> None:
        if self._flag:
            return
        self._flag = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(True)

    async def wait(self, timeout: float | None = None) -> bool:
        """True once set, False when ``timeout`` seconds (None: no limit) pass first."""
        if self._flag:
            return True
        if self._waiter is not None:
            raise RuntimeError("a Signal has one waiter: each listener listens for itself")
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[bool] = loop.create_future()
        self._waiter = waiter
        timer = None if timeout is None else loop.call_later(timeout, _expire, waiter)
        try:
            return await waiter
        finally:
            if timer is not None:
                timer.cancel()
            self._waiter = None


def _expire(waiter: asyncio.Future[bool]) -> None:
    if not waiter.done():
        waiter.set_result(False)


class _Subscription(Generic[_S]):
    """``listen``'s context: the signal is among its key's listeners while it is open. A
    class rather than a generator-based context manager: it is entered on every wait."""

    __slots__ = ("_events", "_key", "_listeners", "_signal")

    def __init__(self, events: dict[str, list[Signal]], key: WakeKey, signal: _S) -> None:
        self._events = events
        self._key = key
        self._signal = signal
        self._listeners: list[Signal] = []

    def __enter__(self) -> _S:
        self._listeners = self._events.setdefault(self._key, [])
        self._listeners.append(self._signal)
        return self._signal

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _error: BaseException | None,
        _trace: TracebackType | None,
    ) -> None:
        listeners = self._listeners
        listeners.remove(self._signal)
        if not listeners and self._events.get(self._key) is listeners:
            del self._events[self._key]


class Claim(Signal):
    """A listener that takes what it is woken for, up to ``room`` items: a worker's job-take.
    Until its claim is made (``looking``) it will see whatever is notified, and so will it
    once woken: ``Wakeups.notify_some`` leaves a notification to such a one rather than wake
    another listener, whose claim would find the job gone (an empty claim, a wasted turn).
    What it answers for is counted in ``owed``; whatever of that its claim did not take, it
    passes on as it leaves (``Wakeups.claiming``)."""

    __slots__ = ("looking", "owed", "room")

    def __init__(self, room: int) -> None:
        super().__init__()
        self.room = room
        #: Its claim is not made yet: it will see all that is queued before it is.
        self.looking = True
        #: Notifications it answers for: those it was woken by, and those left to it.
        self.owed = 0

    def will_look(self) -> bool:
        """Whether it is still to look, or woken to look again, with room for one more."""
        return (self.looking or self.is_set()) and self.owed < self.room


def _alone(_key: str) -> None:
    """``publish`` of a replica that has nobody to tell."""


class Wakeups:
    def __init__(
        self, publish: Callable[[str], None] = _alone, max_wait: float | None = None
    ) -> None:
        """``publish`` carries notified keys to the other replicas (the cluster's); ``max_wait``
        is the longest one wait sleeps before its caller re-checks (None: no limit)."""
        #: Per key, an event per listener, in the order they began to listen.
        self._events: dict[str, list[Signal]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Set when the server is going down: every wait ends and no new one starts.
        self.closing = False
        self._publish = publish
        self.max_wait = max_wait
        self._on_close: list[Callable[[], None]] = []

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """The server's running loop, known only at start-up: ``close_threadsafe`` (a signal
        handler's) schedules the close on it."""
        self._loop = loop

    def close(self) -> None:
        """End every wait now, so long-polls answer before the server stops listening."""
        self.closing = True
        for events in self._events.values():
            for event in events:
                event.set()
        for callback in self._on_close:
            callback()

    def on_close(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` when the server goes down (waits kept elsewhere end too)."""
        self._on_close.append(callback)

    def close_threadsafe(self) -> None:
        """``close`` from a signal handler or another thread."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self.close)

    def listen(self, key: WakeKey) -> contextlib.AbstractContextManager[Signal]:
        """Subscribe *before* checking the condition, so a notify in between is not lost."""
        return self._subscribed(key, Signal())

    @contextlib.contextmanager
    def claiming(self, key: WakeKey, room: int, owed: int = 0) -> Iterator[Claim]:
        """``listen`` for a listener that claims up to ``room`` of what it is woken for,
        answering for ``owed`` notifications already (carried from its last turn). What it
        still owes as it stops listening, however it stops (an answer, an error, a
        cancellation), goes on to another listener: set ``owed`` to 0 to carry it instead."""
        claim = Claim(room)
        claim.owed = owed
        try:
            with self._subscribed(key, claim):
                yield claim
        finally:
            # No longer listening: what it owes goes to another.
            left, claim.owed = claim.owed, 0
            if left:
                self.notify_some(key, left)

    def _subscribed(self, key: WakeKey, signal: _S) -> _Subscription[_S]:
        if self.closing:
            signal.set()
        return _Subscription(self._events, key, signal)

    def notify(self, key: WakeKey) -> None:
        self.deliver(key)
        self._publish(key)

    def notify_some(self, key: WakeKey, count: int) -> None:
        """Wake ``count`` of this replica's waiters on ``key`` (those listening longest), not
        all of them: a job that one take claims would cost every other waiting take an empty
        claim (a write) and a wasted turn. A ``Claim`` that is going to look anyway is left
        the notification first, as far as its room goes; one with no room is not woken (it
        hears ``notify``). One that does not take what it answers for passes it on as it
        stops listening (``claiming``). Other replicas hear the key as from ``notify``."""
        events = self._events.get(key, ())
        for event in events:
            if count <= 0:
                break
            if isinstance(event, Claim) and event.will_look():
                taken = min(count, event.room - event.owed)
                event.owed += taken
                count -= taken
        for event in events:
            if count <= 0:
                break
            if isinstance(event, Claim):
                if event.room <= 0 or event.is_set():
                    # One with no room (a standby's) would only hand it on, to another such.
                    continue
                event.owed += 1
            elif event.is_set():
                continue
            event.set()
            count -= 1
        self._publish(key)

    def deliver(self, key: str) -> None:
        """Wake this replica's waiters on ``key`` (a key another replica published)."""
        for event in self._events.get(key, ()):
            event.set()

    def deliver_all(self, keys: list[str]) -> None:
        for key in keys:
            self.deliver(key)

    async def wait(self, event: Signal, timeout: float) -> bool:
        """``wait`` bounded by ``max_wait``: True when notified, False when the time ran out
        (or the safety-net interval passed). Callers loop and re-check either way."""
        if self.max_wait is not None:
            timeout = min(timeout, self.max_wait)
        return await wait(event, timeout)

    async def repeat(
        self,
        step: Callable[[], Awaitable[None]],
        seconds: float,
        what: str,
        log: logging.Logger,
    ) -> None:
        """A service's loop: ``step`` every ``seconds`` until the server goes down. A pass that
        fails is logged on the service's ``log`` (``what`` failed) and the next one runs as
        usual: one bad pass must not end the loop."""
        while not self.closing:
            try:
                await step()
            except Exception:
                log.exception("%s failed; trying again", what)
            await asyncio.sleep(seconds)

    @property
    def listening(self) -> int:
        """How many listeners wait to be woken (those woken already are not counted)."""
        return sum(not e.is_set() for events in self._events.values() for e in events)


async def wait(event: Signal, timeout: float) -> bool:
    """True when notified, False when the time ran out. Always yields to the loop once, so a
    loop that waits on an event that is already set cannot starve everything else."""
    if event.is_set():
        await asyncio.sleep(0)
        return True
    if timeout <= 0:
        return False
    return await event.wait(timeout)
