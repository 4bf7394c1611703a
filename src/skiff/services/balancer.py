"""Load-balancing endpoints: which ready worker takes each request, and how many requests this
replica has in flight or waiting (the scaler's load for such an endpoint).

A request takes a ``Lease`` on the ready worker with the fewest requests in flight
(``domain.balancing.pick``). With none ready it waits, counted as load so the scaler starts one,
until a worker passes ``GET /ping`` (``services/lb_health.py`` wakes it) or ``wait_seconds``
pass (503 with ``Retry-After``). A worker whose connection fails is out of rotation at once,
and the health check looks at it next.

With several replicas each one's counts go to the store (``lb_demand``: at once when a request
starts waiting, else refreshed every ``BOARD_SECONDS`` while not zero), so the leader's scaler
counts requests that reached the others too, and a request waiting on a follower starts a
worker from zero as one on the leader does.

The store keeps each worker's state in step (running while it has requests in flight, idle
from when it has none, so ``idleTimeout`` stops it); only a change between the two is written,
one write at a time per worker, so the last word is always the current count. A worker whose
last request ended is written idle only once it has stayed so for ``idle_settle_seconds``, with
the moment it became idle: under a steady load its count touches zero between two requests all
the time, and writing each of those would cost two commits a request (most of the proxy's CPU,
docs/performance.md, B8) for a state nobody could read in between.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from attrs import define, field

from skiff.clock import Clock
from skiff.domain.balancing import Candidate, pick
from skiff.domain.endpoints import Endpoint
from skiff.domain.workers import Worker, WorkerState
from skiff.errors import NoWorkerReady
from skiff.services.wakeups import Wake, Wakeups
from skiff.services.workers import Workers
from skiff.store.base import Store

log = logging.getLogger(__name__)

#: How long a list of an endpoint's ready workers is reused (a worker that becomes ready or
#: leaves through this replica is seen at once; through another, within this).
READY_SECONDS = 0.5
#: How often a waiting request looks again without being woken (a worker made ready by
#: another replica).
RECHECK_SECONDS = 1.0
#: The ``Retry-After`` of a request that found no worker ready.
RETRY_AFTER_SECONDS = 5
#: Several replicas: how often each refreshes its counts on the board (the store), and how
#: old another's may be and still count (a replica gone stops counting after this).
BOARD_SECONDS = 1.0
BOARD_FRESH_SECONDS = 5.0
#: How long a worker stays with no request in flight before the store hears it is idle: well
#: under any ``idleTimeout`` (whole seconds), whose count starts from the moment it became idle.
IDLE_SETTLE_SECONDS = 0.5


@dataclass(frozen=True, slots=True)
class Lease:
    """One request's hold on a worker, given back with ``Balancer.release``."""

    endpoint_id: str
    worker_id: str
    #: ``host:port`` of the worker's HTTP server.
    address: str


@dataclass(frozen=True, slots=True)
class Demand:
    """An endpoint's requests on this replica: passed to a worker, and waiting for one."""

    in_flight: int
    waiting: int


class DemandBoard(Protocol):
    """Where replicas share their load-balancing counts (``services/hub.py`` makes it over
    the store)."""

    async def post(self, endpoint_id: str, demand: Demand) -> None: ...

    async def others(self, fresh_seconds: float) -> dict[str, Demand]:
        """The other replicas' counts refreshed within ``fresh_seconds``, summed per endpoint."""
        ...


@define(eq=False, repr=False, slots=False)
class StoreBoard:
    """The board as rows of the store's ``lb_demand``."""

    _store: Store
    _clock: Clock
    _replica_id: str

    async def post(self, endpoint_id: str, demand: Demand) -> None:
        await self._store.set_lb_demand(
            self._replica_id, endpoint_id, demand.in_flight, demand.waiting, self._clock.now()
        )

    async def others(self, fresh_seconds: float) -> dict[str, Demand]:
        since = self._clock.now() - fresh_seconds
        rows = await self._store.lb_demand_of_others(self._replica_id, since)
        return {e: Demand(in_flight, waiting) for e, (in_flight, waiting) in rows.items()}


#: Told the id of a worker whose connection just failed, so that it is checked at once.
Suspect = Callable[[str], None]


def _no_suspect(_worker_id: str) -> None:
    pass


@dataclass(slots=True)
class _Note:
    """What this replica keeps about a worker it has passed requests to."""

    endpoint_id: str
    outstanding: int = 0
    last_picked: float = 0.0
    #: Out of rotation (a failed connection, a failed ping, an exit) until it passes a ping
    #: again or leaves.
    out: bool = False
    #: Since its last request ended (wall clock), while the store has not heard it is idle.
    idle_from: float | None = None
    #: The write of that idle state, due once it has settled.
    settle: asyncio.TimerHandle | None = None


@define(eq=False, repr=False, slots=False)
class Balancer:
    _workers: Workers
    _wakeups: Wakeups
    wait_seconds: float
    _clock: Clock
    _monotonic: Callable[[], float] = time.monotonic
    #: Where replicas share their counts (None: this replica is alone).
    _board: DemandBoard | None = None
    _idle_settle_seconds: float = IDLE_SETTLE_SECONDS
    #: Endpoints whose counts on the board are not zero: refreshed until they are.
    _posted: set[str] = field(init=False, factory=set)
    _notes: dict[str, _Note] = field(init=False, factory=dict)
    _in_flight: dict[str, int] = field(init=False, factory=lambda: defaultdict(int))
    _waiting: dict[str, int] = field(init=False, factory=lambda: defaultdict(int))
    _ready: dict[str, tuple[float, list[Worker]]] = field(init=False, factory=dict)
    _state_locks: dict[str, asyncio.Lock] = field(init=False, factory=dict)
    _syncs: set[asyncio.Task[None]] = field(init=False, factory=set)
    _suspect: Suspect = field(init=False, default=_no_suspect)

    def on_suspect(self, suspect: Suspect) -> None:
        """Who checks a worker whose connection failed (the health check, on the leader)."""
        self._suspect = suspect

    # -- the scaler's view -----------------------------------------------------------------

    def demand(self, endpoint_id: str) -> Demand:
        """This replica's requests for the endpoint."""
        return Demand(self._in_flight.get(endpoint_id, 0), self._waiting.get(endpoint_id, 0))

    async def total_demand(self, endpoint_id: str) -> Demand:
        """Every replica's requests for the endpoint: the others' as the board has them now.
        Read afresh on every call: a stale "waiting" beside a worker that is busy with that
        very request would count it twice (and start a worker nobody needs)."""
        mine = self.demand(endpoint_id)
        if self._board is None:
            return mine
        theirs = (await self._board.others(BOARD_FRESH_SECONDS)).get(endpoint_id, Demand(0, 0))
        return Demand(mine.in_flight + theirs.in_flight, mine.waiting + theirs.waiting)

    async def _post(self, endpoint_id: str) -> None:
        """Put this replica's counts for the endpoint on the board."""
        if self._board is None:
            return
        current = self.demand(endpoint_id)
        await self._board.post(endpoint_id, current)
        if current.in_flight or current.waiting:
            self._posted.add(endpoint_id)
        else:
            self._posted.discard(endpoint_id)

    async def run_board(self) -> None:
        """Several replicas: keep this replica's counts on the board fresh (every replica runs
        it, not only the leader)."""
        if self._board is None:
            return
        while not self._wakeups.closing:
            wanted = self._posted | set(self._in_flight) | set(self._waiting)
            for endpoint_id in wanted:
                try:
                    await self._post(endpoint_id)
                except Exception:
                    log.exception("sharing the load of endpoint %s failed", endpoint_id)
            await asyncio.sleep(BOARD_SECONDS)

    def in_flight_on(self, worker_id: str) -> int:
        note = self._notes.get(worker_id)
        return note.outstanding if note is not None else 0

    # -- rotation --------------------------------------------------------------------------

    def _note(self, worker: Worker) -> _Note:
        note = self._notes.get(worker.id)
        if note is None:
            note = self._notes[worker.id] = _Note(worker.endpoint_id)
        return note

    def out_of_rotation(self, worker: Worker) -> None:
        """Send it nothing more until it passes a ping again."""
        self._note(worker).out = True
        self._ready.pop(worker.endpoint_id, None)

    def back_in_rotation(self, worker: Worker) -> None:
        note = self._notes.get(worker.id)
        if note is not None and note.out:
            note.out = False
            self.changed(worker.endpoint_id)

    def is_out(self, worker_id: str) -> bool:
        note = self._notes.get(worker_id)
        return note is not None and note.out

    def changed(self, endpoint_id: str) -> None:
        """A worker of the endpoint became ready or left: read them again next time, and
        wake the requests waiting for one."""
        self._ready.pop(endpoint_id, None)
        self._wakeups.notify(Wake.endpoint(endpoint_id))

    async def on_exit(self, worker_id: str, _code: int) -> None:
        """A worker's process ended (``WorkerExits``): nothing more goes to it, even while a
        list read before its record went still names it."""
        note = self._notes.get(worker_id)
        if note is not None:
            note.out = True
        self._ready.clear()

    async def _ready_workers(self, endpoint_id: str, fresh: bool) -> list[Worker]:
        now = self._monotonic()
        cached = self._ready.get(endpoint_id)
        if cached is not None and not fresh and now - cached[0] < READY_SECONDS:
            return cached[1]
        records = await self._workers.of_endpoint(endpoint_id)
        ready = [
            w
            for w in records
            if w.state in (WorkerState.IDLE, WorkerState.RUNNING)
            and w.address is not None
            and w.takes_work
        ]
        recorded = {w.id for w in records}
        for worker_id, note in list(self._notes.items()):
            if (
                note.endpoint_id == endpoint_id
                and worker_id not in recorded
                and not note.outstanding
            ):
                del self._notes[worker_id]
                self._state_locks.pop(worker_id, None)
        self._ready[endpoint_id] = (now, ready)
        return ready

    # -- requests --------------------------------------------------------------------------

    async def acquire(self, endpoint: Endpoint) -> Lease:
        """A lease on the ready worker with the fewest requests in flight, waiting up to
        ``wait_seconds`` for one to become ready (the wait counts as load for the scaler)."""
        deadline = self._monotonic() + self.wait_seconds
        waiting = False
        try:
            while True:
                with self._wakeups.listen(Wake.endpoint(endpoint.id)) as event:
                    ready = await self._ready_workers(endpoint.id, fresh=waiting)
                    lease = self._take(endpoint.id, ready)
                    if lease is not None:
                        if waiting:
                            # Off the board as waiting (and on it as in flight) before its
                            # worker is recorded busy: the scaler never counts it twice.
                            waiting = False
                            self._stop_waiting(endpoint.id)
                            await self._post(endpoint.id)
                        await self._sync_state(lease.worker_id)
                        return lease
                    if endpoint.spec.workersMax == 0:
                        raise NoWorkerReady(
                            f"endpoint {endpoint.id} has no worker ready and workersMax is 0: "
                            "raise workersMax to serve requests",
                            RETRY_AFTER_SECONDS,
                        )
                    if not waiting:
                        waiting = True
                        self._waiting[endpoint.id] += 1
                        # On the board before the scaler is woken, wherever it runs.
                        await self._post(endpoint.id)
                        self._wakeups.notify(Wake.SCALER)
                    left = deadline - self._monotonic()
                    if left <= 0:
                        raise NoWorkerReady(
                            f"no worker of endpoint {endpoint.id} became ready within "
                            f"{self.wait_seconds:g} s; try again shortly",
                            RETRY_AFTER_SECONDS,
                        )
                    await self._wakeups.wait(event, min(left, RECHECK_SECONDS))
                    if self._wakeups.closing:
                        raise NoWorkerReady("the server is shutting down", RETRY_AFTER_SECONDS)
        finally:
            if waiting:  # gave up (or was given up): the board hears at its next refresh
                self._stop_waiting(endpoint.id)

    def _stop_waiting(self, endpoint_id: str) -> None:
        self._waiting[endpoint_id] -= 1
        if not self._waiting[endpoint_id]:
            del self._waiting[endpoint_id]

    def _take(self, endpoint_id: str, ready: list[Worker]) -> Lease | None:
        by_id = {w.id: w for w in ready if not self.is_out(w.id)}
        chosen = pick(
            [
                Candidate(w.id, self.in_flight_on(w.id), self._last_picked(w.id))
                for w in by_id.values()
            ]
        )
        if chosen is None:
            return None
        worker = by_id[chosen]
        assert worker.address is not None  # only workers with an address are ready
        note = self._note(worker)
        note.outstanding += 1
        note.last_picked = self._monotonic()
        note.idle_from = None
        if note.settle is not None:  # busy again before the store heard it was idle
            note.settle.cancel()
            note.settle = None
        self._in_flight[endpoint_id] += 1
        return Lease(endpoint_id, chosen, worker.address)

    def _last_picked(self, worker_id: str) -> float:
        note = self._notes.get(worker_id)
        return note.last_picked if note is not None else 0.0

    def release(self, lease: Lease, connection_failed: bool = False) -> None:
        """The request on ``lease`` is over. ``connection_failed``: the worker could not be
        reached or dropped the connection; it gets nothing more until checked."""
        note = self._notes.get(lease.worker_id)
        if note is not None:
            note.outstanding = max(0, note.outstanding - 1)
            if connection_failed:
                note.out = True
            if not note.outstanding and note.idle_from is None:
                note.idle_from = self._clock.now()
                note.settle = asyncio.get_running_loop().call_later(
                    self._idle_settle_seconds, self._settle, lease.worker_id
                )
        self._in_flight[lease.endpoint_id] -= 1
        if self._in_flight[lease.endpoint_id] <= 0:
            del self._in_flight[lease.endpoint_id]
        if connection_failed:
            self._ready.pop(lease.endpoint_id, None)
            self._suspect(lease.worker_id)
        # A request that finished may be what the scaler waits for to stop an idle worker.
        if not self._in_flight.get(lease.endpoint_id):
            self._wakeups.notify(Wake.SCALER)

    def _settle(self, worker_id: str) -> None:
        """The worker has had no request in flight for the settle time: the store hears."""
        note = self._notes.get(worker_id)
        if note is not None:
            note.settle = None
        task = asyncio.create_task(self._sync_state(worker_id))
        self._syncs.add(task)
        task.add_done_callback(self._syncs.discard)

    async def _sync_state(self, worker_id: str) -> None:
        """Write running or idle as the current count says, one write per worker at a time
        (so writes never land out of order); idle from the moment its last request ended."""
        lock = self._state_locks.setdefault(worker_id, asyncio.Lock())
        async with lock:
            note = self._notes.get(worker_id)
            busy = note is not None and note.outstanding > 0
            copy = self._workers.copy(worker_id)
            if copy is not None and copy.state is (
                WorkerState.RUNNING if busy else WorkerState.IDLE
            ):
                return
            since = None if busy or note is None else note.idle_from
            await self._workers.serving(worker_id, busy, since)

    async def aclose(self) -> None:
        """Idle states still settling are written now (the server is stopping), then every
        write under way is waited for."""
        for worker_id, note in self._notes.items():
            if note.settle is not None:
                note.settle.cancel()
                self._settle(worker_id)
        if self._syncs:
            await asyncio.wait(set(self._syncs), timeout=5)
