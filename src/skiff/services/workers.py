"""The register of workers.

The store is the truth: with several replicas a worker's take may reach one replica and its
result another, so every change of state is a targeted update there (claiming a job makes a
worker running and letting go of its last makes it idle, inside the store's own statements).
This keeps only a per-replica copy of each record, so the hot paths (job-take, job-done, ping)
need not read it back on every call: a worker's identity never changes, and what the copy is
used for (is it stopping?) is checked again by the store when it matters.

A copy lives at most ``copy_seconds`` (the worker silence) after the store last confirmed it,
and there are at most ``COPIES_MAX``: a silent outside worker is forgotten (its record deleted)
by the leader alone, so on every other replica its copy must go by itself.
"""

from __future__ import annotations

from attrs import define
from cachetools import TTLCache

from skiff.clock import Clock
from skiff.domain.billing import UsageKind
from skiff.domain.workers import (
    MAX_OUTSIDE_WORKERS,
    Worker,
    WorkerKind,
    WorkerState,
    outside_id_problem,
    outside_key,
)
from skiff.errors import Invalid, TooManyRequests
from skiff.services.metering import UsageEnded, not_metered
from skiff.store.base import Store

#: How often one replica records that a worker called in (``last_seen``); external workers
#: are forgotten after a silence far longer than this.
TOUCH_EVERY_SECONDS = 2.0
#: How long a count of live workers (for the per-worker rate limit rule) is reused.
LIVE_COUNT_SECONDS = 1.0
#: Counts kept at most (one per endpoint asked about); past this many the oldest go first.
LIVE_COUNTS_MAX = 10_000
#: Copies of worker records kept at most. Neither limit bounds them on its own: an endpoint
#: may have ``MAX_OUTSIDE_WORKERS`` (512) outside workers at once, but one user may hold
#: ``SKIFF_MAX_PER_USER`` (1000) endpoints, half a million ids. So this bounds the memory
#: (about 750 bytes a copy with the longest ids: 12 MB) and still holds 32 endpoints full of
#: outside workers besides the local ones; past it the least recently used copy goes first,
#: which costs only a store read on that worker's next call.
COPIES_MAX = 16_384
#: How long a copy is kept unconfirmed by default: the default ``SKIFF_WORKER_SILENCE_SECONDS``.
COPY_SECONDS = 60.0


@define(slots=True)
class _Copy:
    """A worker's record as the store last gave it to this replica."""

    worker: Worker
    #: When this replica last wrote the worker's ``last_seen`` (``seen``); -inf: never.
    touched: float = float("-inf")


@define(eq=False, repr=False, slots=False)
class Workers:
    _store: Store
    _clock: Clock
    #: This replica: the owner recorded on the local workers it starts.
    replica_id: str = "local"
    #: Told when a worker is removed, which ends its metering then.
    _usage_ended: UsageEnded = not_metered
    #: A copy unconfirmed by the store for this long is dropped. At most the worker silence
    #: (``SKIFF_WORKER_SILENCE_SECONDS``): a worker silent that long is one the leader forgets,
    #: and by about then no other replica keeps (and is slowed or misled by) its copy.
    copy_seconds: float = COPY_SECONDS
    copies_max: int = COPIES_MAX

    def __attrs_post_init__(self) -> None:
        #: worker id -> its copy, on the injected clock; each store answer starts its time anew.
        self._copies: TTLCache[str, _Copy, float] = TTLCache(
            maxsize=self.copies_max, ttl=self.copy_seconds, timer=self._clock.now
        )
        #: endpoint id -> its live workers, on the injected clock (tests move it by hand).
        self._live: TTLCache[str, int, float] = TTLCache(
            maxsize=LIVE_COUNTS_MAX, ttl=LIVE_COUNT_SECONDS, timer=self._clock.now
        )

    async def add(self, worker: Worker) -> Worker:
        """Record a worker this replica starts (or replace its record)."""
        if worker.kind is WorkerKind.LOCAL and worker.owner is None:
            worker.owner = self.replica_id
        await self._store.save_worker(worker)
        self._remember(worker.id, worker)
        return worker

    async def get(self, worker_id: str) -> Worker | None:
        """The current record, read from the store."""
        worker = await self._store.get_worker(worker_id)
        self._remember(worker_id, worker)
        return worker

    def copy(self, worker_id: str) -> Worker | None:
        """This replica's last copy, without asking the store."""
        held = self._copies.get(worker_id)
        return None if held is None else held.worker

    def copies_held(self) -> int:
        """How many copies this replica holds now (those past their time are dropped first)."""
        return len(self._copies)

    async def of_endpoint(self, endpoint_id: str) -> list[Worker]:
        return await self._store.list_workers(endpoint_id)

    async def all(self) -> list[Worker]:
        return await self._store.list_workers(None)

    async def live_count(self, endpoint_id: str) -> int:
        """Workers up (starting, idle or running), from a count at most a second old."""
        try:  # not .get(): on a TTLCache that checks the key's age twice, and this is per request
            return self._live[endpoint_id]
        except KeyError:
            pass
        count = sum(1 for w in await self._store.list_workers(endpoint_id) if w.is_live)
        self._live[endpoint_id] = count
        return count

    async def jobs_of(self, worker_id: str) -> list[str]:
        """Jobs the worker holds: running, or stopped and not let go of yet."""
        return await self._store.jobs_of_worker(worker_id)

    async def seen(self, endpoint_id: str, worker_id: str, version: int) -> Worker:
        """A worker called in through ``endpoint_id`` naming itself ``worker_id`` (the path's,
        its ``RUNPOD_POD_ID``): one the server started (or an outside one recorded before
        names were kept per endpoint) under its id, else an outside worker under its
        endpoint's key for the name (``outside_key``), recorded at its first call. Its name is
        its own choice, so it is its endpoint's alone: another endpoint's worker of the same
        name is neither refused nor met. The record's ``id`` is the one every later step
        uses."""
        now = self._clock.now()
        # The common case, answered from the copy. One naming another endpoint is never
        # taken from here: it may be stale (the leader forgot the worker, and its id now
        # belongs to another endpoint, or to none), so the store decides below.
        held = self._copy_of(endpoint_id, worker_id)
        if (
            held is not None
            and now - held.touched < TOUCH_EVERY_SECONDS
            and held.worker.state is not WorkerState.INITIALIZING
        ):
            return held.worker
        # Another endpoint's worker is not touched: a caller cannot make a worker of someone
        # else's look ready (idle) by naming its id through its own endpoint. The record the
        # copy was of is touched first, so an outside worker's touch finds it at once.
        ids = [worker_id, outside_key(endpoint_id, worker_id)]
        if held is not None and held.worker.id != worker_id:
            ids.reverse()
        for candidate in ids:
            worker = await self._store.touch_worker(candidate, endpoint_id, now)
            if worker is not None:
                break
        else:
            worker = await self._add_outside(endpoint_id, worker_id, version, now)
        self._copies[worker.id] = _Copy(worker, touched=now)
        return worker

    def _copy_of(self, endpoint_id: str, worker_id: str) -> _Copy | None:
        """This replica's copy of ``endpoint_id``'s worker called ``worker_id``, fresh or not:
        under the id itself (a worker the server started), else under its outside key (which
        names the endpoint)."""
        try:  # not .get(): on a TTLCache that checks the key's age twice, and this is per call
            held = self._copies[worker_id]
        except KeyError:
            held = None
        if held is not None and held.worker.endpoint_id == endpoint_id:
            return held
        try:
            return self._copies[outside_key(endpoint_id, worker_id)]
        except KeyError:
            return None

    async def _add_outside(self, endpoint_id: str, name: str, version: int, now: float) -> Worker:
        """A new outside worker of ``endpoint_id`` called ``name``, recorded under its
        endpoint's key for the name (``outside_key``), whatever other endpoints' workers are
        called: what it is recorded under never depends on another tenant's, and two first
        calls at once (its ping and its take, perhaps on two replicas) meet on one record."""
        await self._may_add_outside(endpoint_id, name)
        return await self._store.add_worker(
            Worker(
                id=outside_key(endpoint_id, name),
                endpoint_id=endpoint_id,
                kind=WorkerKind.EXTERNAL,
                state=WorkerState.IDLE,
                version=version,
                started_at=now,
                last_seen=now,
                idle_since=now,
            )
        )

    async def _may_add_outside(self, endpoint_id: str, worker_id: str) -> None:
        """Refuse a new outside worker whose id is none, or one past ``MAX_OUTSIDE_WORKERS``
        of its endpoint (those silent for ``SKIFF_WORKER_SILENCE_SECONDS`` are forgotten)."""
        problem = outside_id_problem(worker_id)
        if problem is not None:
            raise Invalid(problem, field="worker_id")
        workers = await self._store.list_workers(endpoint_id)
        outside = sum(1 for w in workers if w.kind is WorkerKind.EXTERNAL)
        if outside >= MAX_OUTSIDE_WORKERS:
            raise TooManyRequests(
                f"endpoint {endpoint_id} has {outside} outside workers calling in, the most "
                f"it may have; worker {worker_id} is new to it (a silent one is forgotten after "
                "SKIFF_WORKER_SILENCE_SECONDS)",
                retry_after=60,
            )

    async def set_state(self, worker: Worker, state: WorkerState) -> None:
        fields: dict[str, object] = {"state": state}
        if state is WorkerState.IDLE:
            fields["idle_since"] = self._clock.now()
        elif state is WorkerState.RUNNING:
            fields["idle_since"] = None
        worker.state = state
        self._remember(worker.id, await self._store.update_worker(worker.id, fields))

    async def touch(self, worker: Worker) -> Worker | None:
        """Note that a worker this replica checks on was seen now (never adds a record)."""
        touched = await self._store.touch_worker(worker.id, worker.endpoint_id, self._clock.now())
        if touched is not None:
            self._remember(worker.id, touched)
        return touched

    async def ready(self, worker_id: str) -> Worker | None:
        """A load-balancing worker passed ``GET /ping``: idle, if it was starting."""
        worker = await self._store.worker_ready(worker_id, self._clock.now())
        if worker is not None:
            self._remember(worker_id, worker)
        return worker

    async def serving(
        self, worker_id: str, busy: bool, since: float | None = None
    ) -> Worker | None:
        """A load-balancing worker has requests in flight (running) or none (idle, from
        ``since``: now if not given); one in any other state is left so (None)."""
        now = self._clock.now() if since is None else since
        worker = await self._store.worker_serving(worker_id, busy, now)
        if worker is not None:
            self._remember(worker_id, worker)
        return worker

    async def update(self, worker: Worker, **fields: object) -> None:
        """Set some fields of the record (and of ``worker``), leaving the others as stored."""
        for name, value in fields.items():
            setattr(worker, name, value)
        self._remember(worker.id, await self._store.update_worker(worker.id, fields))

    def jobs_taken(self, worker: Worker) -> None:
        """The store made it running when it claimed the jobs; keep the copy in step."""
        if worker.state in (WorkerState.IDLE, WorkerState.INITIALIZING):
            worker.state = WorkerState.RUNNING
            worker.idle_since = None

    async def jobs_released(self, worker: Worker, job_ids: list[str] | None) -> None:
        """The worker let go of these jobs (all, with None)."""
        await self._store.let_go_of_jobs(worker.id, job_ids, self._clock.now())

    async def overdue_stops(self, grace: float) -> list[Worker]:
        """Workers told to stop a job more than ``grace`` seconds ago that still hold it."""
        ids = await self._store.overdue_stop_workers(self._clock.now() - grace)
        overdue = []
        for worker_id in ids:
            worker = await self._store.get_worker(worker_id)
            if worker is not None:
                overdue.append(worker)
        return overdue

    async def mark_recycle(self, worker: Worker) -> None:
        if not worker.recycle:
            await self.update(worker, recycle=True)

    async def remove(self, worker_id: str) -> None:
        self._copies.pop(worker_id, None)
        await self._store.delete_worker(worker_id)
        await self._usage_ended(UsageKind.WORKER, worker_id)

    def _remember(self, worker_id: str, worker: Worker | None) -> None:
        """Keep what the store answered (None: it has no such worker), for ``copy_seconds``
        more; when this replica last touched the worker is kept with it."""
        if worker is None:
            self._copies.pop(worker_id, None)
            return
        held = self._copies.get(worker_id)
        touched = float("-inf") if held is None else held.touched
        self._copies[worker_id] = _Copy(worker, touched)
